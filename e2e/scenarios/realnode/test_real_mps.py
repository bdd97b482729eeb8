"""Two MPS claims (30 % and 70 %) on the real node: containerd applies the plugin's CDI specs, each
container gets its MPS client variables and its GPU's pipe directory, and its CUDA process (the fake libcuda)
really is a client of the GPU's MPS control daemon, which the plugin started for the first claim and stops
after the last."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dra_driver.core.families import mps as mps_family
from dra_driver.core.families.mps import (
    PINNED_MEMORY_ENV,
    PIPE_DIRECTORY_ENV,
    THREAD_PERCENTAGE_ENV,
    container_pipe_dir,
)
from dra_driver.vocabulary.names import GpuUUID
from e2e.harness.kube import Json, get_pod, is_running, wait_for
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.upgrade import roll
from e2e.realnode.workloads import ProbeContainer, claim_template, mps, probe_pod
from kubelet_plugin.host_parts.mps.control import MpsControl
from kubelet_plugin.node.paths import PluginPaths
from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL

from .helpers import apply, delete_pod, mounts, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def ask(pipe: str, command: str) -> list[str]:
    done = subprocess.run(
        [str(FAKE_MPS_CONTROL)],
        input=f"{command}\n",
        env={"CUDA_MPS_PIPE_DIRECTORY": pipe, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return done.stdout.split()


def test_two_mps_claims_are_clients_of_one_daemon(bed: SimCluster, real_node: RealNode, real_ns: str) -> None:
    control = MpsControl(
        root=PluginPaths.under(real_node.root).family_dir(mps_family.NAME), tool=str(FAKE_MPS_CONTROL)
    )
    apply(
        bed,
        real_ns,
        [claim_template("mps-30", mps("2000Mi", "30")), claim_template("mps-70", mps("3000Mi", "70"))],
    )
    for name in ("mps-30", "mps-70"):
        apply(
            bed,
            real_ns,
            [
                probe_pod(
                    name,
                    node=real_node.name,
                    templates={"gpu": name},
                    containers=[ProbeContainer("client", ("hold", "100"), claims=("gpu",))],
                )
            ],
        )
    pods = {name: running(real_node, real_ns, name) for name in ("mps-30", "mps-70")}
    (gpu,) = {results(real_node, real_ns, p, "gpu")[0]["device"] for p in pods.values()}
    assert gpu.endswith("-mps")
    (state,) = control.running()
    uuid = GpuUUID(state.gpu_uuid)
    for name, cores, mib in (("mps-30", "30", 2000), ("mps-70", "70", 3000)):
        got = report(real_node, pods[name], "client")
        assert got["cuInit"] == 0
        env = got["env"]
        assert (env[THREAD_PERCENTAGE_ENV], env[PINNED_MEMORY_ENV]) == (cores, f"0={mib}M")
        assert env[PIPE_DIRECTORY_ENV] == container_pipe_dir(uuid) and container_pipe_dir(uuid) in mounts(got)
        # the daemon serves one GPU: the client sees it, and only it, as device 0
        assert [g["uuid"] for g in got["gpus"]] == [uuid]
        assert got["gpus"][0]["allocated"] == 100 << 20
    pipe = str(control.dirs(uuid).pipe_dir)
    (server,) = ask(pipe, "get_server_list")
    assert len(ask(pipe, f"get_client_list {server}")) == 2  # both containers' processes, one server

    delete_pod(real_node, real_ns, "mps-30")
    assert [s.gpu_uuid for s in control.running()] == [uuid]  # mps-70 still uses it
    delete_pod(real_node, real_ns, "mps-70")
    wait_for("the GPU's MPS daemon to stop", lambda: control.running() == (), timeout_s=30)


def test_mps_clients_keep_running_across_a_plugin_upgrade(
    bed: SimCluster, real_node: RealNode, real_ns: str
) -> None:
    """The control daemon runs on the host, outside the plugin's container (chart value mps.hostCgroup): a
    `helm upgrade` replaces the plugin's pod, and the daemon, its server and its clients go on; the new pod
    adopts the daemon for the next MPS claim."""
    control = MpsControl(
        root=PluginPaths.under(real_node.root).family_dir(mps_family.NAME), tool=str(FAKE_MPS_CONTROL)
    )
    apply(bed, real_ns, [claim_template("mps-40", mps("1000Mi", "40"))])

    def client(name: str) -> Json:
        manifest = probe_pod(
            name,
            node=real_node.name,
            templates={"gpu": "mps-40"},
            containers=[ProbeContainer("client", ("hold", "100"), claims=("gpu",))],
        )
        apply(bed, real_ns, [manifest])
        pod = running(real_node, real_ns, name)
        assert report(real_node, pod, "client")["cuInit"] == 0
        return pod

    first = client("mps-first")
    (state,) = control.running()
    pipe = control.dirs(GpuUUID(state.gpu_uuid)).pipe_dir
    daemon_pid = (pipe / "nvidia-cuda-mps-control.pid").read_text()
    (server,) = ask(str(pipe), "get_server_list")
    # out of the plugin's container: in the chart's cgroup, below the node's cgroup root here
    hierarchies = list(Path("/sys/fs/cgroup").glob(f"*/{real_node.cgroup_root}/tessera-mps/cgroup.procs"))
    assert hierarchies and all(p.read_text().split() for p in hierarchies)

    old = real_node.chart.current
    roll(real_node, "logLevel=debug")
    assert real_node.chart.current.uid != old.uid

    # the same daemon and server answer, and the first client never stopped
    assert (pipe / "nvidia-cuda-mps-control.pid").read_text() == daemon_pid
    assert ask(str(pipe), "get_server_list") == [server]
    now = get_pod(real_node.api, real_ns, "mps-first")
    assert now is not None and is_running(now)
    assert now["status"]["containerStatuses"][0]["restartCount"] == 0
    assert (
        now["status"]["containerStatuses"][0]["containerID"]
        == first["status"]["containerStatuses"][0]["containerID"]
    )
    # the new pod's plugin adopted the daemon: a second client joins the same server
    client("mps-second")
    assert (pipe / "nvidia-cuda-mps-control.pid").read_text() == daemon_pid
    assert len(ask(str(pipe), f"get_client_list {server}")) == 2

    delete_pod(real_node, real_ns, "mps-first")
    delete_pod(real_node, real_ns, "mps-second")
    wait_for("the GPU's MPS daemon to stop", lambda: control.running() == (), timeout_s=30)
