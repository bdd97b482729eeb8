"""Starting a daemon on the host instead of in the plugin's container, so that it outlives the container.

A GPU's MPS control daemon must survive an upgrade or a restart of the node plugin: its clients are other
pods' processes. A process the plugin starts lives in the plugin container's mount namespace and cgroup, and
the runtime kills every process of that cgroup when the container goes (a container that shares the host's
PID namespace gets no PID-namespace teardown, so its runtime signals the whole cgroup instead). So the daemon
is started with the mount namespace of PID 1 — the host's init, which the plugin sees because its pod shares
the host's PID namespace (`hostPID: true`) — and moved into a cgroup of its own in every hierarchy, found
through PID 1's root directory. The plugin is privileged, which both need. The daemon then sees the host's
file system: its tool is run by its host path, and its pipe and log directories are host paths the chart
mounts in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.vocabulary.errors import MpsError

NSENTER = "nsenter"
HOST_INIT = Path("/proc/1")


@dataclass(frozen=True, slots=True)
class HostLauncher:
    cgroup: str  # e.g. /tessera-mps, below the root of every hierarchy
    host_paths: Mapping[str, str] = field(default_factory=dict)  # a tool as this process sees it → the host's
    env: Mapping[str, str] = field(default_factory=dict)  # added to a launched daemon's environment
    host_init: Path = HOST_INIT

    def __post_init__(self) -> None:
        parts = [p for p in self.cgroup.split("/") if p]
        if not self.cgroup.startswith("/") or not parts or any(p in (".", "..") for p in parts):
            raise MpsError(
                f"--mps-host-cgroup: {self.cgroup!r} is not an absolute cgroup path such as /tessera-mps"
            )

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run in the host's mount namespace (its program by its host path)."""
        program = self.host_paths.get(argv[0], argv[0])
        return [NSENTER, f"--mount={self.host_init}/ns/mnt", "--", program, *argv[1:]]

    def _hierarchies(self) -> list[Path]:
        base = self.host_init / "root/sys/fs/cgroup"
        try:
            if (base / "cgroup.controllers").exists():  # cgroup v2: one hierarchy
                return [base]
            return sorted(p for p in base.iterdir() if (p / "cgroup.procs").exists())
        except OSError as e:
            raise MpsError(
                f"cannot read the host's cgroups at {base} ({e.strerror}): the plugin's pod needs hostPID "
                "and privileges to keep MPS daemons alive across its restarts"
            ) from e

    def adopt(self, pid: int) -> None:
        """Moves `pid` (the daemon) into the launcher's cgroup in every hierarchy, out of the container's."""
        hierarchies = self._hierarchies()
        if not hierarchies:
            raise MpsError(f"no cgroup hierarchy below {self.host_init}/root/sys/fs/cgroup (needs hostPID)")
        for h in hierarchies:
            target = h / self.cgroup.strip("/")
            try:
                _make_cgroup(h, target)
                (target / "cgroup.procs").write_text(f"{pid}\n")
            except OSError as e:
                raise MpsError(
                    f"cannot move the MPS control daemon (pid {pid}) into cgroup {target} ({e.strerror}); it "
                    "would die with the plugin's container"
                ) from e


# cgroup v1 cpuset refuses a task (ENOSPC) in a cgroup whose CPUs and memory nodes are not set: a new one
# inherits its parent's.
_CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")


def _make_cgroup(hierarchy: Path, target: Path) -> None:
    """`target` and the levels above it below `hierarchy`, each new cpuset level given its parent's sets."""
    path = hierarchy
    for part in target.relative_to(hierarchy).parts:
        parent, path = path, path / part
        if path.is_dir():
            continue
        path.mkdir(exist_ok=True)
        for name in _CPUSET_FILES:
            own = path / name
            if own.exists() and not own.read_text().strip():
                own.write_text((parent / name).read_text())
