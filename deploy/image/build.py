"""The node plugin image's steps, driven by deploy/image/build.sh (standard library only; run from the
repository root as `python -m deploy.image.build STEP ...`). What the image is lives in
deploy/image/image.json, which deploy/Dockerfile follows too (tests/unit/deploy/test_image_dockerfile.py).

Steps:
    mmdebstrap-args          the arguments of the base layer's mmdebstrap run, one per line
    site DIR                 the Python dependencies and the tessera package, installed into DIR and pruned
    prune DIR                only the pruning (deploy/Dockerfile runs it on its own pip install)
    stage DIR --site S --library L
                             layer 2's tree in DIR: S at paths.site, L at paths.library, the launcher
    compile --base B --root DIR
                             precompiles DIR's site with the Python of B (layer 1 unpacked), if python.compile
    archive --base T --root DIR --out A
                             the OCI archive: T (a tar) below the layer made from DIR; prints the name,
                             the manifest digest and the layers' bytes
    unpack A DIR             the image's root file system from archive A into DIR (layers in order)
    smoke DIR                runs the plugin inside DIR (chroot): the CLI's help, imports (SMOKE below)
    lock                     rewrites requirements.txt: pyproject.toml's dependencies resolved for the image
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from deploy.image import oci

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FACTS = HERE / "image.json"
CHART = REPO / "deploy" / "helm" / "tessera" / "Chart.yaml"
LAUNCHER = HERE / "launcher.py"
PRODUCT = ("dra_driver", "kubelet_plugin", "cdi", "admission", "scheduler_extender")
# What must work inside the image: the CLI, the daemon's command, the modules the daemon loads late.
SMOKE = (
    ("tessera", "--help"),
    ("tessera", "plugin", "--help"),
    ("python3", "-c", "import kubelet_plugin.serving.plugin_instance, dra_driver.backends.nvml"),
    # the admission webhook runs from the same image (`tessera webhook`, chart admissionWebhook)
    ("tessera", "webhook", "--help"),
    ("python3", "-c", "import admission.main, cryptography.x509"),
    # so does the optional scheduler extender (chart schedulerExtender), with its shipped mix
    ("python3", "-m", "scheduler_extender", "--help"),
    ("python3", "-c", "from scheduler_extender.__main__ import read_mix; assert read_mix(None)"),
)
MMDEBSTRAP_HOOKS = "/usr/share/mmdebstrap/hooks"
_APP_VERSION = re.compile(r'^appVersion:\s*"?([^"\s]+)"?\s*$', re.MULTILINE)


def facts() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FACTS.read_text())
    return loaded


def app_version(chart: Path = CHART) -> str:
    m = _APP_VERSION.search(chart.read_text())
    if m is None:
        raise SystemExit(f"{chart}: no appVersion")
    return m.group(1)


def image_name(f: dict[str, Any]) -> str:
    return f"{f['name']}:{app_version()}"


def epoch(f: dict[str, Any]) -> int:
    """SOURCE_DATE_EPOCH when set, else image.json's: every time in the image (files, created) is this one."""
    return int(os.environ.get("SOURCE_DATE_EPOCH") or f["source_date_epoch"])


def mmdebstrap_args(f: dict[str, Any]) -> list[str]:
    base = f["base"]
    return [
        f"--variant={base['variant']}",
        f"--include={','.join(base['packages'])}",
        # merged /usr made by symlinks, as debootstrap does: else usrmerge is installed, and perl with it
        *(f"--hook-dir={MMDEBSTRAP_HOOKS}/{h}" for h in base["hooks"]),
        *(f"--dpkgopt=path-exclude={p}" for p in base["path_exclude"]),
        "--mode=root",
        base["release"],
    ]


def _pip_target_args(f: dict[str, Any]) -> list[str]:
    """pip's options for wheels the image's Python loads (not the Python running pip)."""
    py = f["python"]
    args = ["--python-version", py["version"], "--implementation", "cp", "--abi", py["abi"]]
    for platform in py["platforms"]:
        args += ["--platform", platform]
    return args


def _pip(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "pip", "--disable-pip-version-check", *args], check=True)


def install_site(site: Path, python: str, f: dict[str, Any]) -> None:
    requirements = REPO / f["python"]["requirements"]
    if not (REPO / "kubelet_plugin" / "proto" / "gen" / "__init__.py").is_file():
        raise SystemExit("kubelet_plugin/proto/gen is missing: run `make proto` first")
    common = ["install", "--quiet", "--no-deps", "--no-compile", "--target", str(site)]
    pinned = ["--only-binary=:all:", "--require-hashes", *_pip_target_args(f), "-r", str(requirements)]
    _pip(python, *common, *pinned)
    # The package is built from a copy of the product's sources, so the tree gets no build/ or egg-info.
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tessera"
        src.mkdir()
        shutil.copy2(REPO / "pyproject.toml", src)
        for package in PRODUCT:
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(REPO / package, src / package, ignore=ignore)
        _pip(python, *common, "--upgrade", "--no-build-isolation", str(src))  # replaces bin/, pruned anyway
    prune(site, f)


def prune(site: Path, f: dict[str, Any]) -> None:
    """Drops what the plugin never loads (image.json python.prune: the asyncio Kubernetes client and the
    aiohttp family only it needs, console scripts), compiled files and direct_url.json (the build path)."""
    for name in f["python"]["prune"]:
        found = [site / name] if (site / name).exists() else []
        if "/" not in name:
            found += sorted(site.glob(f"{name}-*.dist-info"))
        if not found:
            raise SystemExit(f"{site}: nothing called {name}; update python.prune in {FACTS}")
        for path in found:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for path in sorted(site.rglob("__pycache__"), reverse=True):
        shutil.rmtree(path)
    for path in [*site.rglob("direct_url.json"), *site.rglob("*.pyc")]:
        path.unlink()
    # RECORD lists the files a distribution installed, with hashes (direct_url.json's too): keep what is left
    for record in sorted(site.glob("*.dist-info/RECORD")):
        lines = record.read_text().splitlines(keepends=True)
        record.write_text("".join(line for line in lines if (site / line.split(",", 1)[0]).exists()))


def stage(root: Path, site: Path, library: Path, f: dict[str, Any]) -> None:
    paths = f["paths"]
    shutil.copytree(site, root / paths["site"].lstrip("/"), symlinks=True)
    for source, inside in ((library, paths["library"]), (LAUNCHER, paths["launcher"])):
        target = root / inside.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o755)


def compile_site(base: Path, root: Path, f: dict[str, Any]) -> None:
    """Precompiles the site by the image's own Python (chroot into `base`, layer 1 unpacked), with hashes
    of the sources, not times, unchecked: the image's files never change; the bytes are reproducible."""
    inside = f["paths"]["site"]
    staged, there = root / inside.lstrip("/"), base / inside.lstrip("/")
    there.parent.mkdir(parents=True, exist_ok=True)
    staged.rename(there)
    try:
        command = ["python3", "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", inside]
        subprocess.run(["chroot", str(base), *command], env=dict(f["env"]), check=True)
    finally:
        there.rename(staged)


def iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_config(f: dict[str, Any]) -> dict[str, object]:
    return {
        "Entrypoint": list(f["entrypoint"]),
        "Cmd": list(f["cmd"]),
        "Env": [f"{k}={v}" for k, v in f["env"].items()],
        "User": f["user"],
        "WorkingDir": f["workdir"],
        "Labels": {
            "org.opencontainers.image.title": f["title"],
            "org.opencontainers.image.description": f["description"],
            "org.opencontainers.image.version": app_version(),
        },
    }


def write_image(base: Path, root: Path, out: Path, f: dict[str, Any]) -> oci.Written:
    seconds = epoch(f)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        layer = Path(tmp) / "layer.tar"
        oci.write_layer(oci.tree_entries(root), layer, mtime=seconds)
        created = iso(seconds)
        return oci.write_archive(
            name=image_name(f),
            layers=[base, layer],
            config=image_config(f),
            history=[
                {"created": created, "created_by": "mmdebstrap " + " ".join(mmdebstrap_args(f))},
                {"created": created, "created_by": "deploy/image/build.sh"},
            ],
            created=created,
            out=out,
            mtime=seconds,
        )


def unpack(archive: Path, dest: Path) -> None:
    """The layers in order into dest, with tar (device nodes, owners and absolute links as they are)."""
    index = oci.read_index(archive)
    descriptors: list[dict[str, str]] = index["manifests"]  # type: ignore[assignment]
    [descriptor] = descriptors
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> IO[bytes]:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            if member is None:
                raise SystemExit(f"{archive}: no blob {digest}")
            return member

        manifest = json.loads(blob(descriptor["digest"]).read())
        dest.mkdir(parents=True, exist_ok=True)
        for layer in manifest["layers"]:
            extract = ["tar", "-x", "--numeric-owner", "-C", str(dest)]
            with subprocess.Popen(extract, stdin=subprocess.PIPE) as p:
                assert p.stdin is not None
                shutil.copyfileobj(blob(layer["digest"]), p.stdin, 1 << 20)
                p.stdin.close()
            if p.returncode != 0:
                raise SystemExit(f"tar failed unpacking {layer['digest']}")


def smoke(root: Path, f: dict[str, Any]) -> None:
    """The image's own Python on the image's files: chroot (needs root), the image's environment only."""
    env = {**f["env"], "PYTHONPATH": f["paths"]["site"]}
    for command in SMOKE:
        result = subprocess.run(
            ["chroot", str(root), *command], env=env, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SystemExit(f"in the image, {' '.join(command)} failed:\n{result.stdout}{result.stderr}")


def lock(python: str, f: dict[str, Any]) -> None:
    """Resolves pyproject.toml's dependencies for the image's Python and platform, with wheel hashes."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    requirements = REPO / f["python"]["requirements"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip(
            python, "install", "--quiet", "--dry-run", "--ignore-installed", "--only-binary=:all:",
            "--target", str(Path(tmp) / "target"), *_pip_target_args(f), "--report", str(report),
            *dependencies,
        )  # fmt: skip
        installed = json.loads(report.read_text())["install"]
    header = [line for line in requirements.read_text().splitlines() if line.startswith("#")]
    rows = sorted(
        (
            re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(),
            i["metadata"]["version"],
            i["download_info"]["archive_info"]["hashes"]["sha256"],
        )
        for i in installed
    )
    body = [f"{name}=={version} \\\n    --hash=sha256:{sha}" for name, version, sha in rows]
    requirements.write_text("\n".join([*header, *body]) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--python", default=sys.executable, help="the Python whose pip installs")
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("mmdebstrap-args")
    sub.add_parser("name")
    sub.add_parser("lock")
    for step in ("site", "prune", "smoke"):
        sub.add_parser(step).add_argument("dir", type=Path)
    p = sub.add_parser("stage")
    p.add_argument("dir", type=Path)
    p.add_argument("--site", type=Path, required=True)
    p.add_argument("--library", type=Path, required=True)
    p = sub.add_parser("compile", help="precompile layer 2's site with the Python of layer 1")
    p.add_argument("--base", type=Path, required=True, help="layer 1, unpacked")
    p.add_argument("--root", type=Path, required=True, help="layer 2's tree")
    p = sub.add_parser("archive")
    p.add_argument("--base", type=Path, required=True)
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("unpack")
    p.add_argument("archive", type=Path)
    p.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    f = facts()
    if args.step == "mmdebstrap-args":
        sys.stdout.write("".join(a + "\n" for a in mmdebstrap_args(f)))
    elif args.step == "name":
        sys.stdout.write(image_name(f) + "\n")
    elif args.step == "lock":
        lock(args.python, f)
    elif args.step == "site":
        install_site(args.dir, args.python, f)
    elif args.step == "prune":
        prune(args.dir, f)
    elif args.step == "stage":
        stage(args.dir, args.site, args.library, f)
    elif args.step == "compile":
        if f["python"]["compile"]:
            compile_site(args.base, args.root, f)
    elif args.step == "archive":
        written = write_image(args.base, args.root, args.out, f)
        sys.stdout.write(f"{image_name(f)} {written.digest} {written.layers_size}\n")
    elif args.step == "unpack":
        unpack(args.archive, args.dir)
    elif args.step == "smoke":
        smoke(args.dir, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
