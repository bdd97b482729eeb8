"""OCI image archives without a registry or a container engine: one uncompressed layer from local files, in
the OCI image-layout tar that `ctr images import` reads (the `io.containerd.image.name` annotation names it).

Run by e2e/realnode/build.sh with the system python3 (standard library only):

    python3 e2e/realnode/image.py pause --pause FILE --out pause.oci.tar
    python3 e2e/realnode/image.py probe --probe FILE --busybox FILE --out probe.oci.tar

The archives are reproducible: fixed timestamps and owners, entries in sorted order.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "tessera.dev/e2e/pause:v1"
PROBE_IMAGE = "tessera.dev/e2e/probe:v1"
PROBE_PATH = "/usr/local/bin/cudaprobe"
_EPOCH = 0
_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True, slots=True)
class Entry:
    """One path of the image's file system: a directory, a file (its bytes) or a symbolic link."""

    path: str  # absolute, inside the image
    mode: int
    data: bytes | None = None
    link: str | None = None


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(path=path, mode=mode)


def file_from(host: Path, path: str, mode: int = 0o755) -> Entry:
    return Entry(path=path, mode=mode, data=host.read_bytes())


def parents(entries: Iterable[Entry]) -> list[Entry]:
    """The directories every entry needs, once each."""
    needed: set[str] = set()
    for e in entries:
        parts = e.path.strip("/").split("/")[:-1]
        needed.update("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))
    return [directory(p) for p in sorted(needed)]


def layer_tar(entries: Sequence[Entry]) -> bytes:
    explicit = {e.path for e in entries}
    everything = [d for d in parents(entries) if d.path not in explicit] + list(entries)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in sorted(everything, key=lambda x: x.path):
            info = tarfile.TarInfo(e.path.lstrip("/"))
            info.mode, info.mtime, info.uid, info.gid = e.mode, _EPOCH, 0, 0
            if e.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, e.link
                tar.addfile(info)
            elif e.data is not None:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
    return buffer.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(*, name: str, entries: Sequence[Entry], entrypoint: Sequence[str], out: Path) -> str:
    """Writes the OCI layout tar of a one-layer image named `name`; returns the manifest digest."""
    layer = layer_tar(entries)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": list(entrypoint), "Env": [_PATH_ENV], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
            "history": [{"created_by": "e2e/realnode/image.py", "created": "1970-01-01T00:00:00Z"}],
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": _MANIFEST,
            "config": {"mediaType": _CONFIG, "digest": _digest(config), "size": len(config)},
            "layers": [{"mediaType": _LAYER, "digest": _digest(layer), "size": len(layer)}],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": _MANIFEST,
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    )
    files = {
        "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
        "index.json": index,
        **{f"blobs/sha256/{_digest(b)[7:]}": b for b in (layer, config, manifest)},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _EPOCH
            tar.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, _EPOCH
            tar.addfile(info, io.BytesIO(files[path]))
    return _digest(manifest)


def shared_libraries(binary: Path) -> list[Path]:
    """The host libraries `binary` loads (ldd), except those the container gets from the driver mount."""
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True)
    found = []
    for line in result.stdout.splitlines():
        m = _LDD_LINE.search(line)
        if m and not Path(m.group(1)).name.startswith(("libcuda.so", "libnvidia-ml.so")):
            found.append(Path(m.group(1)))
    return found


def base_entries() -> list[Entry]:
    passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
    group = b"root:x:0:\nnogroup:x:65534:\n"
    return [
        *(directory(d) for d in ("/dev", "/proc", "/sys", "/etc", "/root", "/run", "/var")),
        directory("/tmp", 0o1777),
        Entry(path="/etc/passwd", mode=0o644, data=passwd),
        Entry(path="/etc/group", mode=0o644, data=group),
    ]


def probe_entries(probe: Path, busybox: Path) -> list[Entry]:
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    entries = [*base_entries(), file_from(probe, PROBE_PATH), file_from(busybox, "/bin/busybox")]
    entries += [
        Entry(path=f"/bin/{a}", mode=0o777, link="busybox")
        for a in sorted(set(applets.split()))
        if a != "busybox"
    ]
    # the C library the probe (and libtessera.so, preloaded into it) needs, at the paths ldd names
    entries += [file_from(lib.resolve(), str(lib), 0o755) for lib in shared_libraries(probe)]
    return entries


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="image", required=True)
    pause = sub.add_parser("pause", help=f"{PAUSE_IMAGE}: the sandbox image")
    pause.add_argument("--pause", type=Path, required=True, help="the static pause binary")
    pause.add_argument("--out", type=Path, required=True)
    probe = sub.add_parser("probe", help=f"{PROBE_IMAGE}: busybox and cudaprobe")
    probe.add_argument("--probe", type=Path, required=True, help="the cudaprobe binary")
    probe.add_argument("--busybox", type=Path, required=True, help="a static busybox")
    probe.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for given in [v for k, v in vars(args).items() if k not in ("image", "out")]:
        if not Path(given).is_file():
            parser.error(f"{given}: no such file")
    if args.image == "pause":
        entries = [*base_entries(), file_from(args.pause, "/pause")]
        digest = write_archive(name=PAUSE_IMAGE, entries=entries, entrypoint=["/pause"], out=args.out)
        name = PAUSE_IMAGE
    else:
        entries = probe_entries(args.probe, args.busybox)
        digest = write_archive(name=PROBE_IMAGE, entries=entries, entrypoint=[PROBE_PATH], out=args.out)
        name = PROBE_IMAGE
    print(f"{name} {digest} -> {os.fspath(args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
