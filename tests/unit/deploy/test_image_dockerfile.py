"""deploy/Dockerfile describes the image `make image` builds: both follow deploy/image/image.json (release,
packages, requirements, paths, user, env, entrypoint, cmd), so neither can drift alone."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import pytest

from deploy.image import build

DOCKERFILE = build.REPO / "deploy" / "Dockerfile"


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The global ARGs and the stages, each instruction one (KEYWORD, rest) with its continuations joined."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "a continuation at the end of the file"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in logical:
        keyword, _, rest = instruction.strip().partition(" ")
        keyword, rest = keyword.upper(), " ".join(rest.split())
        if keyword == "FROM":
            words = rest.split()
            stages.append(Stage(image=words[0], name=words[2] if len(words) == 3 else None))
        elif stages:
            stages[-1].instructions.append((keyword, rest))
        elif keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args, stages


def key_values(rest: str) -> dict[str, str]:
    """ENV and LABEL: key=value pairs, values possibly quoted."""
    return dict(word.split("=", 1) for word in shlex.split(rest))


def apt_packages(run: str) -> list[str]:
    m = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", run)
    assert m, run
    return m.group(1).split()


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    return build.facts()


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse(DOCKERFILE.read_text())


def final(dockerfile: tuple[dict[str, str], list[Stage]]) -> Stage:
    return dockerfile[1][-1]


def test_every_stage_is_the_same_debian_release(
    facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]
) -> None:
    _, stages = dockerfile
    assert [s.name for s in stages] == ["library", "site", None]
    assert {s.image for s in stages} == {facts["base"]["docker_image"]}
    assert facts["base"]["docker_image"] == f"debian:{facts['base']['release']}-slim"


def test_runtime_packages_are_the_base_layers(
    facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]
) -> None:
    [run, *_] = final(dockerfile).all("RUN")
    assert apt_packages(run) == facts["base"]["packages"]


def test_the_same_pinned_requirements_and_pruning(
    facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]
) -> None:
    site = dockerfile[1][1]
    runs = " ".join(site.all("RUN"))
    assert f"--require-hashes --target {facts['paths']['site']} -r {facts['python']['requirements']}" in runs
    assert f"python -m deploy.image.build prune {facts['paths']['site']}" in runs
    assert "--no-deps --no-compile" in runs
    # the generated gRPC code requires a grpcio at least as new as the grpcio-tools that made it
    tools = re.search(r"grpcio-tools==(\S+)", runs)
    pinned = re.search(r"^grpcio==(\S+)", (build.REPO / facts["python"]["requirements"]).read_text(), re.M)
    assert tools and pinned
    version = [tuple(int(x) for x in v.group(1).split(".")) for v in (tools, pinned)]
    assert version[0] <= version[1]


def test_the_same_files_at_the_same_paths(
    facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]
) -> None:
    copies = [c.split() for c in final(dockerfile).all("COPY")]
    destinations = {words[-1] for words in copies}
    assert destinations == {facts["paths"]["site"], facts["paths"]["library"], facts["paths"]["launcher"]}
    launcher = next(words for words in copies if words[-1] == facts["paths"]["launcher"])
    assert launcher[-2] == str(build.LAUNCHER.relative_to(build.REPO)) and "--chmod=0755" in launcher
    assert f'sys.path.insert(0, "{facts["paths"]["site"]}")' in build.LAUNCHER.read_text()


def test_the_site_stage_copies_every_package_the_image_installs(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    """Else `pip install .` there leaves a package out, and the image's `tessera` (which imports admission)
    or the chart's scheduler extender fails to start."""
    site = dockerfile[1][1]
    copied = {words.split()[-1].rstrip("/") for words in site.all("COPY")}
    missing = set(build.PRODUCT) - copied
    assert not missing, f"deploy/Dockerfile's site stage copies none of {sorted(missing)}"


def test_precompiled_exactly_when_the_archive_is(
    facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]
) -> None:
    compiles = [r for r in final(dockerfile).all("RUN") if "compileall" in r]
    expected = f"python3 -m compileall -q --invalidation-mode unchecked-hash {facts['paths']['site']}"
    assert compiles == ([expected] if facts["python"]["compile"] else [])


def test_user_env_workdir_entrypoint_cmd(
    facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]
) -> None:
    stage = final(dockerfile)
    assert stage.all("USER") == [facts["user"]]
    assert stage.all("WORKDIR") == [facts["workdir"]]
    env: dict[str, str] = {}
    for rest in stage.all("ENV"):
        env.update(key_values(rest))
    assert env == facts["env"]
    assert [json.loads(e) for e in stage.all("ENTRYPOINT")] == [facts["entrypoint"]]
    assert [json.loads(c) for c in stage.all("CMD")] == [facts["cmd"]]


def test_labels_and_version(facts: dict[str, Any], dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    args, _ = dockerfile
    assert args["VERSION"] == build.app_version()
    [labels] = [key_values(rest) for rest in final(dockerfile).all("LABEL")]
    expected = {k: str(v) for k, v in build.image_config(facts)["Labels"].items()}  # type: ignore[attr-defined]
    expected["org.opencontainers.image.version"] = "${VERSION}"
    assert labels == expected


def test_the_parser_reads_what_it_checks() -> None:
    args, stages = parse(
        'ARG V=1\nFROM a:b AS x\n# note\nRUN one \\\n    two\nFROM c\nENV A=1 \\\n    B="two words"\n'
    )
    assert args == {"V": "1"}
    assert [(s.image, s.name) for s in stages] == [("a:b", "x"), ("c", None)]
    assert stages[0].all("RUN") == ["one two"]
    assert key_values(stages[1].all("ENV")[0]) == {"A": "1", "B": "two words"}
