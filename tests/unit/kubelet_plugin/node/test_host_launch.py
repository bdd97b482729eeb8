"""Starting MPS daemons on the host: the command that enters PID 1's mount namespace, and the move into a
cgroup of their own in every hierarchy (a fake /proc/1 whose root holds cgroup v1 and v2 trees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.vocabulary.errors import MpsError
from kubelet_plugin.node.host_launch import HostLauncher


def test_the_tool_runs_by_its_host_path_in_the_hosts_mount_namespace() -> None:
    launcher = HostLauncher(cgroup="/tessera-mps", host_paths={"/driver-root/usr/bin/t": "/run/nv/usr/bin/t"})
    assert launcher.command(["/driver-root/usr/bin/t", "-d"]) == [
        "nsenter", "--mount=/proc/1/ns/mnt", "--", "/run/nv/usr/bin/t", "-d",
    ]  # fmt: skip


def test_adopt_moves_the_daemon_into_every_v1_hierarchy(tmp_path: Path) -> None:
    cgroups = tmp_path / "root/sys/fs/cgroup"
    for h in ("cpu", "memory", "unified"):
        (cgroups / h).mkdir(parents=True)
        (cgroups / h / "cgroup.procs").write_text("")
    (cgroups / "not-a-hierarchy").mkdir()
    HostLauncher(cgroup="/node-x/tessera-mps", host_init=tmp_path).adopt(4242)
    for h in ("cpu", "memory", "unified"):
        assert (cgroups / h / "node-x/tessera-mps/cgroup.procs").read_text() == "4242\n"
    assert not (cgroups / "not-a-hierarchy/node-x").exists()


def test_adopt_on_cgroup_v2_and_without_host_pid(tmp_path: Path) -> None:
    cgroups = tmp_path / "root/sys/fs/cgroup"
    cgroups.mkdir(parents=True)
    (cgroups / "cgroup.controllers").write_text("cpu memory\n")
    HostLauncher(cgroup="/tessera-mps", host_init=tmp_path).adopt(7)
    assert (cgroups / "tessera-mps/cgroup.procs").read_text() == "7\n"
    with pytest.raises(MpsError, match="needs hostPID"):
        HostLauncher(cgroup="/tessera-mps", host_init=tmp_path / "nothing").adopt(7)


@pytest.mark.parametrize("bad", ["tessera-mps", "/", "/a/../b", ""])
def test_a_cgroup_that_is_not_an_absolute_path_is_refused(bad: str) -> None:
    with pytest.raises(MpsError, match="--mps-host-cgroup"):
        HostLauncher(cgroup=bad)


def test_a_new_cpuset_cgroup_gets_its_parents_cpus_and_memory_nodes(tmp_path: Path) -> None:
    cpuset = tmp_path / "root/sys/fs/cgroup/cpuset"
    (cpuset / "node-x").mkdir(parents=True)
    for d, cpus in ((cpuset, "0-1"), (cpuset / "node-x", "1")):
        (d / "cgroup.procs").write_text("")
        (d / "cpuset.cpus").write_text(f"{cpus}\n")
        (d / "cpuset.mems").write_text("0\n")
    # what the kernel shows in a fresh cpuset cgroup: the files, empty (the fake makes them on mkdir)
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.is_relative_to(cpuset):
            for name in ("cpuset.cpus", "cpuset.mems", "cgroup.procs"):
                (self / name).write_text("")

    with pytest.MonkeyPatch.context() as m:
        m.setattr(Path, "mkdir", mkdir)
        HostLauncher(cgroup="/node-x/tessera-mps", host_init=tmp_path).adopt(99)
    made = cpuset / "node-x/tessera-mps"
    assert (made / "cpuset.cpus").read_text() == "1\n" and (made / "cpuset.mems").read_text() == "0\n"
    assert (made / "cgroup.procs").read_text() == "99\n"
