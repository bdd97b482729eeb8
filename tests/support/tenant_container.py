"""A tenant's container, as far as the tests need one: a process in a mount namespace of its own that sees a
CDI spec's mounts (bind, read-only where the spec says so) under a scratch root, running as root without
CAP_SYS_ADMIN (so it can neither unmount nor remount, like a container's root). Needs root and util-linux's
`unshare`, `mount` and `setpriv`; `available()` says whether this machine has them."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dra_driver.vocabulary.container import Mount

# What a tenant's program starts with: `attempt(name, f)` records in `out` "ok" or the errno's name of f().
ATTEMPT = """
import errno, json, os, socket
out = {}
def attempt(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
"""


def fill(directory: Path, files: int) -> None:
    """What a tenant can leave in its claim directory: `files` empty files."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(files):
            os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def fill_entries(directory: Path, entries: int) -> None:
    """What a tenant can leave in its claim directory, made fast: `entries` names, hard links to a few empty
    files (ext4 allows 65,000 links to one). Removing them is an unlink per name, as for `fill`'s files;
    making them costs a fifth of creating as many inodes (300,000 files took 45 s of CPU on the 2-core
    workplace)."""
    per_file = 60_000
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(entries):
            source = f"f{i - i % per_file}"
            if i % per_file == 0:
                os.close(os.open(source, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
            else:
                os.link(source, f"f{i}", src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(t) for t in ("unshare", "mount", "setpriv"))


def inside(rootfs: Path, container_path: str) -> Path:
    """Where a container path lies under the scratch root."""
    return rootfs / container_path.lstrip("/")


def run(rootfs: Path, mounts: Sequence[Mount], program: str, *, timeout: float = 60) -> str:
    """Run the Python `program` in the container; its stdout (it fails the test when the program fails)."""
    steps = []
    for m in mounts:
        target = inside(rootfs, m.container_path)
        if Path(m.host_path).is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif not target.exists():  # a file mount over a file of an earlier mount needs no point of its own
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        host, where = shlex.quote(m.host_path), shlex.quote(str(target))
        steps.append(f"mount --bind {host} {where}")
        if "ro" in m.options:
            steps.append(f"mount -o remount,bind,ro {where}")
    steps.append(
        "exec setpriv --bounding-set -sys_admin --inh-caps -sys_admin "
        f"{shlex.quote(sys.executable)} -c {shlex.quote(program)}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", "; ".join(steps)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"container failed ({done.returncode}): {done.stderr}"
    return done.stdout
