"""deploy/image/build.py: the pruning of the image's site, the requirements against pyproject.toml, the base
layer's mmdebstrap arguments and the image config, all from deploy/image/image.json."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from deploy.image import build


@pytest.fixture
def facts() -> dict[str, Any]:
    return build.facts()


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def fake_site(site: Path) -> None:
    write(site / "kubernetes" / "client" / "__init__.py")
    write(site / "kubernetes" / "aio" / "__init__.py")
    write(site / "kubernetes" / "client" / "__pycache__" / "__init__.cpython-311.pyc")
    for name in ("aiohttp", "aiohttp_retry", "aiohappyeyeballs", "aiosignal", "frozenlist", "multidict"):
        write(site / name / "__init__.py")
        write(site / f"{name}-1.0.dist-info" / "METADATA")
    write(site / "propcache" / "__init__.py")
    write(site / "yarl" / "__init__.py")
    write(site / "bin" / "normalizer", "#!/build/venv/bin/python\n")
    write(site / "stray.pyc")
    write(site / "tessera-0.1.0.dist-info" / "direct_url.json", '{"url": "file:///tmp/build"}')
    write(
        site / "tessera-0.1.0.dist-info" / "RECORD",
        "dra_driver/__init__.py,sha256=x,1\n"
        "tessera-0.1.0.dist-info/direct_url.json,sha256=y,30\n"
        "../../bin/tessera,sha256=z,2\n"
        "tessera-0.1.0.dist-info/RECORD,,\n",
    )
    write(site / "dra_driver" / "__init__.py")


def test_prune_drops_what_the_plugin_never_loads(tmp_path: Path, facts: dict[str, Any]) -> None:
    site = tmp_path / "site"
    fake_site(site)
    build.prune(site, facts)
    left = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert left == [
        "dra_driver/__init__.py",
        "kubernetes/client/__init__.py",
        "tessera-0.1.0.dist-info/RECORD",
    ]
    # RECORD names only what is there: direct_url.json (the build path) and the console script are gone
    assert (site / "tessera-0.1.0.dist-info" / "RECORD").read_text() == (
        "dra_driver/__init__.py,sha256=x,1\ntessera-0.1.0.dist-info/RECORD,,\n"
    )


def test_prune_refuses_a_list_that_no_longer_matches(tmp_path: Path, facts: dict[str, Any]) -> None:
    site = tmp_path / "site"
    fake_site(site)
    (site / "yarl" / "__init__.py").unlink()
    (site / "yarl").rmdir()
    with pytest.raises(SystemExit, match="nothing called yarl"):
        build.prune(site, facts)


def pinned() -> dict[str, tuple[str, str]]:
    text = (build.REPO / build.facts()["python"]["requirements"]).read_text()
    rows = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", text, re.M)
    entries = [line for line in text.splitlines() if line and not line.startswith(("#", " "))]
    assert len(rows) == len(entries), "every requirement is pinned with its wheel's hash"
    return {canonicalize_name(name): (version, sha) for name, version, sha in rows}


def test_requirements_pin_every_dependency_within_pyproject() -> None:
    pins = pinned()
    declared = tomllib.loads((build.REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for spec in map(Requirement, declared):
        name = canonicalize_name(spec.name)
        assert name in pins, f"{name} (pyproject.toml) is not in requirements.txt"
        assert spec.specifier.contains(pins[name][0]), f"{name}=={pins[name][0]} outside {spec.specifier}"


def test_the_image_installs_no_rich() -> None:
    """structlog loads `rich` wherever it is installed (~0.1 s of every tessera process's start): neither the
    image nor .venv has it (tests/unit/kubelet_plugin/test_command.py)."""
    assert "rich" not in pinned()


def test_the_pruned_distributions_are_the_pinned_ones(facts: dict[str, Any]) -> None:
    pins = pinned()
    for name in facts["python"]["prune"]:
        if "/" not in name and name != "bin":
            assert canonicalize_name(name) in pins


def test_mmdebstrap_arguments(facts: dict[str, Any]) -> None:
    args = build.mmdebstrap_args(facts)
    assert args[0] == "--variant=essential" and args[-2:] == ["--mode=root", "bookworm"]
    assert "--include=python3-minimal,libpython3.11-stdlib,libstdc++6" in args
    assert "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr" in args
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in args


def test_image_config_and_name(facts: dict[str, Any]) -> None:
    chart = (build.REPO / "deploy" / "helm" / "tessera" / "Chart.yaml").read_text()
    [version] = re.findall(r'^appVersion: "(.+)"$', chart, re.M)
    assert build.image_name(facts) == f"tessera.dev/tessera:{version}"
    config = build.image_config(facts)
    assert config["Entrypoint"] == ["tessera"] and config["Cmd"] == ["plugin"]
    assert config["User"] == "0:0" and config["WorkingDir"] == "/"
    assert config["Env"] == [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
    ]
    labels = config["Labels"]
    assert isinstance(labels, dict)
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.title"] == "tessera"


def test_times_come_from_source_date_epoch(facts: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert build.epoch(facts) == facts["source_date_epoch"]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    assert build.epoch(facts) == 86400
    assert build.iso(0) == "1970-01-01T00:00:00Z"
    assert build.iso(facts["source_date_epoch"]) == "2025-05-20T00:00:00Z"


def test_the_image_installs_every_package_of_the_distribution() -> None:
    """pyproject.toml's packages are the ones the image installs (build.PRODUCT) and the ones whose change
    rebuilds it (build.sh's stamp): a package left out is missing from the image, as the scheduler extender
    was (#32: the chart runs it from this image)."""
    include = tomllib.loads((build.REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = {pattern.removesuffix("*") for pattern in include["find"]["include"]}
    assert set(build.PRODUCT) == packages
    script = (build.HERE / "build.sh").read_text()
    [hashed] = re.findall(r"find ((?:\w+ )+)interceptor/src", script)
    assert packages <= set(hashed.split())
