"""The real node's cgroup root (the kubelet's `cgroupRoot`): made before the kubelet starts, since it refuses
a root that does not exist, and removed once the node's processes are gone. cgroup v1 here (one directory per
controller hierarchy); on cgroup v2 it is one directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

from e2e.realnode.errors import RealNodeError

CGROUP_FS = Path("/sys/fs/cgroup")


def hierarchies(base: Path = CGROUP_FS, *, unified: bool = False) -> list[Path]:
    """The mounted hierarchies. A hybrid machine also mounts a controller-less cgroup2 at `unified`: the
    kubelet needs its root only in the v1 ones, but runc makes the containers' cgroups there too."""
    if (base / "cgroup.controllers").exists():
        return [base]
    return sorted(
        p for p in base.iterdir() if (unified or p.name != "unified") and (p / "cgroup.procs").exists()
    )


def create(name: str, base: Path = CGROUP_FS) -> list[Path]:
    made = []
    for h in hierarchies(base):
        path = h / name
        path.mkdir(exist_ok=True)
        made.append(path)
    return made


def remove(name: str, *, base: Path = CGROUP_FS, timeout_s: float = 15.0) -> None:
    """Removes the cgroup tree `name` in every hierarchy, leaves first, waiting while dying processes leave
    it."""
    deadline = time.monotonic() + timeout_s
    for h in hierarchies(base, unified=True):
        top = h / name
        if not top.exists():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(Path(w[0]).parts)):
            while True:
                try:
                    Path(dirpath).rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        raise RealNodeError(f"cannot remove cgroup {dirpath}: {e.strerror}") from e
                    time.sleep(0.1)
