"""OCI image archives without a registry or a container engine: one uncompressed layer from local files, in
the OCI image-layout tar that `ctr images import` reads (the `io.containerd.image.name` annotation names it).

Run by e2e/realnode/build.sh with the system python3 (standard library only; the writer itself is the product
image's, deploy/image/oci.py):

    python3 e2e/realnode/image.py pause --pause FILE --out pause.oci.tar
    python3 e2e/realnode/image.py probe --probe FILE --busybox FILE --out probe.oci.tar

The archives are reproducible: fixed timestamps and owners, entries in sorted order.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# The OCI writer is the product image's (deploy/image/oci.py); build.sh runs this with the system python3.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from deploy.image import oci
from deploy.image.oci import Entry, directory, file_from

PAUSE_IMAGE = "tessera.dev/e2e/pause:v1"
PROBE_IMAGE = "tessera.dev/e2e/probe:v1"
PROBE_PATH = "/usr/local/bin/cudaprobe"
_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Entry and directory come from deploy/image/oci.py, for the callers that build entries (the unit tests)
__all__ = [
    "PAUSE_IMAGE",
    "PROBE_IMAGE",
    "PROBE_PATH",
    "Entry",
    "base_entries",
    "directory",
    "file_from",
    "main",
    "probe_entries",
    "shared_libraries",
    "write_archive",
]
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def write_archive(*, name: str, entries: Sequence[Entry], entrypoint: Sequence[str], out: Path) -> str:
    """Writes the OCI layout tar of a one-layer image named `name`; returns the manifest digest."""
    written = oci.write_archive(
        name=name,
        layers=[oci.layer_tar(entries)],
        config={"Entrypoint": list(entrypoint), "Env": [_PATH_ENV], "WorkingDir": "/"},
        history=[{"created_by": "e2e/realnode/image.py", "created": "1970-01-01T00:00:00Z"}],
        out=out,
    )
    return written.digest


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
