"""The MPS family on a node, in this process: claims prepared through the family seam start their GPU's MPS
control daemon (the fake nvidia-cuda-mps-control), give each container its client variables, survive a
restart of the node daemon, and are settled at start-up; a client run with a prepared claim's edits (the fake
libcuda's tmps) is a client of that daemon and holds to its limits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdi.writer import read_spec
from dra_driver.core.families import mps as mps_family
from dra_driver.core.families.mps import (
    PINNED_MEMORY_ENV,
    PIPE_DIRECTORY_ENV,
    THREAD_PERCENTAGE_ENV,
    container_pipe_dir,
)
from dra_driver.vocabulary.names import GpuUUID, cdi_spec_file_name
from kubelet_plugin.claims.reconcile import reconcile
from kubelet_plugin.host_parts.mps import gpus_in_use
from kubelet_plugin.host_parts.mps.control import MpsControl
from kubelet_plugin.host_parts.mps.watch import RECOVERED_REASON, MpsWatch
from tests.support import tenant_container
from tests.support.doubles.fake_mps import stop_mps_daemons
from tests.support.doubles.interceptor_programs import FAKE_GPU0, FAKE_GPU1, MPS_CONTROL, TMPS, env
from tests.support.prepare_env import Env, claim, result
from tests.support.tenant_container import inside

pytestmark = pytest.mark.skipif(not MPS_CONTROL.exists(), reason="run `make dev` to build the fake MPS tool")
GiB = 1 << 30
GPU0 = GpuUUID(FAKE_GPU0)
# the fake libcuda's two GPUs, so that the clients a test runs see the GPUs the plugin planned for
NODE_YAML = f"""apiVersion: sim.tessera.dev/v1
kind: SimulatedNode
nodeName: node-a
gpus:
- product: H100-80GB-SXM
  uuid: {FAKE_GPU0}
- product: H100-80GB-SXM
  uuid: {FAKE_GPU1}
"""


@pytest.fixture
def node() -> Iterator[Env]:
    # short: the MPS control socket's path must fit a unix socket address (108 bytes)
    root = Path(tempfile.mkdtemp(prefix="tmf-", dir="/tmp"))
    e = Env.create(root, node_yaml=NODE_YAML)
    try:
        yield e
    finally:
        stop_mps_daemons(e.paths.family_dir(mps_family.NAME))
        shutil.rmtree(root, ignore_errors=True)


def mps(gpu: int, *, memory: str, cores: str, request: str = "gpu") -> dict[str, Any]:
    return result(
        f"gpu-{gpu}-mps",
        request=request,
        shareID=os.urandom(4).hex(),
        consumedCapacity={"memory": memory, "cores": cores},
    )


def daemons(e: Env) -> dict[GpuUUID, int | None]:
    return {
        s.gpu_uuid: s.pid
        for s in MpsControl(root=e.paths.family_dir(mps_family.NAME), tool=str(MPS_CONTROL)).running()
    }


def claim_env(e: Env, uid: str) -> dict[str, str]:
    """The claim's MPS client variables as a process on the host sees them (mounts mapped back). The pipe
    directory is reached through a short link: a container reaches it at a short mount point, while its host
    path (<root>/<GPU UUID>/clients/<claim uid>) may be longer than a unix socket address."""
    spec = json.loads((e.paths.cdi_dir / cdi_spec_file_name(uid)).read_text())  # type: ignore[arg-type]
    edits = spec["containerEdits"]
    mounts = {m["containerPath"]: m["hostPath"] for m in edits.get("mounts", [])}
    out = dict(kv.split("=", 1) for kv in edits["env"])
    short = e.root / f"c-{uid[:8]}"
    if not short.is_symlink():
        short.symlink_to(mounts[out[PIPE_DIRECTORY_ENV]])
    out[PIPE_DIRECTORY_ENV] = str(short)
    return {k: v for k, v in out.items() if k.startswith("CUDA_MPS_")}


def test_two_claims_one_daemon_per_gpu_their_variables_and_its_life(node: Env) -> None:
    a, b = node.put(
        claim("a", mps(0, memory="20Gi", cores="30")),
        claim("b", mps(0, memory="40Gi", cores="70")),
    )
    preparer = node.preparer()
    answers = preparer.prepare([a, b])
    assert all(r.error is None for r in answers.values()), answers
    assert list(daemons(node)) == [FAKE_GPU0]
    ea, eb = claim_env(node, a.uid), claim_env(node, b.uid)
    assert (ea[THREAD_PERCENTAGE_ENV], ea[PINNED_MEMORY_ENV]) == ("30", "0=20480M")
    assert (eb[THREAD_PERCENTAGE_ENV], eb[PINNED_MEMORY_ENV]) == ("70", "0=40960M")
    # each claim has a directory of its own, holding one link to the same daemon's control socket
    dirs = [os.path.realpath(x[PIPE_DIRECTORY_ENV]) for x in (ea, eb)]
    assert dirs[0] != dirs[1] and [sorted(os.listdir(d)) for d in dirs] == [["control"], ["control"]]
    pipe = node.paths.family_dir(mps_family.NAME) / FAKE_GPU0 / "pipe"
    assert {os.stat(Path(d) / "control").st_ino for d in dirs} == {os.stat(pipe / "control").st_ino}

    # a process with claim a's variables is a client of GPU 0's daemon, sees that GPU as device 0, and stops
    # at the pinned limit
    run_env = env(None, node.root / "gpu-state", **ea)
    done = subprocess.run(
        [str(TMPS), "view", "1", FAKE_GPU0], env=run_env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [str(TMPS), "pinned", str(20 * GiB)], env=run_env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr

    assert preparer.unprepare([a])[a.uid].error is None
    assert list(daemons(node)) == [FAKE_GPU0]  # b still uses it
    assert preparer.unprepare([b])[b.uid].error is None
    assert daemons(node) == {}  # stopped after the last, its directories gone


def test_the_daemon_outlives_a_restart_and_is_settled_at_start_up(node: Env) -> None:
    (a,) = node.put(claim("a", mps(1, memory="1Gi", cores="50")))
    assert node.preparer().prepare([a])[a.uid].error is None
    (pid,) = daemons(node).values()

    report = reconcile(node.preparer(boot_id="boot-1"))  # a restarted node daemon: the claim still lives
    assert report.kept_claims == (a.uid,) and daemons(node) == {FAKE_GPU1: pid}

    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the daemon died: the claim is rolled forward and the daemon started again
    report = reconcile(node.preparer(boot_id="boot-1"))
    assert report.rolled_forward == (a.uid,), report.problems
    (again,) = daemons(node).values()
    assert again not in (None, pid)

    node.claims.delete(namespace="ns", name="a")  # the claim went while the node daemon was down
    report = reconcile(node.preparer(boot_id="boot-1"))
    assert report.released_claims == (a.uid,) and daemons(node) == {}
    # the released claim's client directory (its link to the daemon's socket), then the daemon no claim uses
    client_dir, daemon = (str(w) for w in report.removed_on_host)
    assert client_dir.startswith("MPS client directory ") and client_dir.endswith(f"/clients/{a.uid}")
    assert daemon == f"mps-daemon {FAKE_GPU1}"


def test_a_claim_holds_one_mps_device(node: Env) -> None:
    (c,) = node.put(
        claim(
            "two",
            mps(0, memory="1Gi", cores="10", request="x"),
            mps(1, memory="1Gi", cores="10", request="y"),
        )
    )
    error = node.preparer().prepare([c])[c.uid].error
    assert error is not None and "a claim may hold one MPS device" in error
    assert daemons(node) == {}


# ---- issue #20, attack 1: one tenant commands the GPU's shared control daemon ----------------------------

ATTACKS = (
    "set_active_thread_percentage {server} 1",
    "set_default_active_thread_percentage 1",
    "shutdown_server {server} -f",
    "quit",
)


def tool(pipe_dir: str, commands: list[str], *, uid: int | None = None) -> subprocess.CompletedProcess[str]:
    """The control tool as a process of a claim's container: its pipe directory is the claim's."""
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
    return subprocess.run(
        [*as_user, str(MPS_CONTROL)],
        input="".join(f"{c}\n" for c in commands),
        env={"PATH": os.environ["PATH"], PIPE_DIRECTORY_ENV: pipe_dir},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def admin(node: Env, gpu: str, command: str) -> str:
    pipe = str(node.paths.family_dir(mps_family.NAME) / gpu / "pipe")
    done = tool(pipe, [command])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_tenant_can_neither_command_the_daemon_nor_change_another_claims_share(node: Env) -> None:
    """Claim A's processes (as uid 65534, and as root) send through their pipe directory what took claim B's
    share from 70 % to 1 %, shut its server down and quit the daemon (issue #20): each is refused, B's client
    stays connected to the same server at the same percentage, and the daemon still serves."""
    a, b = node.put(
        claim("a", mps(0, memory="1Gi", cores="30")),
        claim("b", mps(0, memory="1Gi", cores="70")),
    )
    assert all(r.error is None for r in node.preparer().prepare([a, b]).values())
    ea, eb = claim_env(node, a.uid), claim_env(node, b.uid)
    target = Path(os.path.realpath(ea[PIPE_DIRECTORY_ENV]))
    for d in [target, *target.parents]:  # the test's temp root is 0700: let uid 65534 reach A's directory
        if d == node.root or node.root in d.parents:
            os.chmod(d, 0o755)
    holder = subprocess.Popen(
        [str(TMPS), "hold", "30"],
        env=env(None, node.root / "gpu-state", **eb),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("ready")
        (server,) = admin(node, FAKE_GPU0, "get_server_list").split()
        before = admin(node, FAKE_GPU0, f"get_active_thread_percentage {server}")
        daemon = daemons(node)[GPU0]
        for uid in (65534, None):
            done = tool(ea[PIPE_DIRECTORY_ENV], [c.format(server=server) for c in ATTACKS], uid=uid)
            refusals = [line for line in done.stdout.splitlines() if "permission denied" in line]
            assert len(refusals) == len(ATTACKS), (uid, done.stdout, done.stderr)
            # what a client needs still works from A's directory: queries, and being a client
            assert tool(ea[PIPE_DIRECTORY_ENV], ["get_server_list"], uid=uid).stdout.split() == [server]
        assert admin(node, FAKE_GPU0, "get_server_list").split() == [server]
        assert admin(node, FAKE_GPU0, f"get_active_thread_percentage {server}") == before
        assert str(holder.pid) in admin(node, FAKE_GPU0, f"get_client_list {server}").split()
        assert daemons(node)[GPU0] == daemon and holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def client_ok(e: Env, uid: str) -> bool:
    """Whether a new process with the claim's variables is a client of its GPU's daemon."""
    done = subprocess.run(
        [str(TMPS), "view", "1", FAKE_GPU0],
        env=env(None, e.root / "gpu-state", **claim_env(e, uid)),
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0


REPLACE_CONTROL = """
d = os.environ["PIPE"]
out["listing"] = sorted(os.listdir(d))
attempt("unlink", lambda: os.unlink(os.path.join(d, "control")))
attempt("rename", lambda: os.rename(os.path.join(d, "control"), os.path.join(d, "old")))
def bind_own():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(os.path.join(d, "control2"))
attempt("bind", bind_own)
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.path.join(d, "control"))
attempt("connect", connect)
print(json.dumps(out))
"""


@pytest.mark.skipif(not tenant_container.available(), reason="needs root, unshare, mount and setpriv")
def test_a_root_tenant_cannot_replace_the_control_socket_its_container_gets(
    node: Env, tmp_path: Path
) -> None:
    """Issue #20: a root process of claim A replaced pipe/control with its own socket, took claim B's client
    handshake and made B's cuInit fail. A's container gets only its own read-only directory with a link to
    `control` (from the claim's real CDI spec here): it can connect, not replace, and sees nothing else."""
    a, b = node.put(
        claim("a", mps(0, memory="1Gi", cores="30")),
        claim("b", mps(0, memory="1Gi", cores="70")),
    )
    assert all(r.error is None for r in node.preparer().prepare([a, b]).values())
    spec = read_spec(node.paths.cdi_spec_file(a.uid))
    (mount,) = [m for m in spec.container_edits.mounts if m.container_path == container_pipe_dir(GPU0)]
    rootfs = node.root / "r"  # short: the socket paths inside must fit a unix socket address
    program = tenant_container.ATTEMPT + REPLACE_CONTROL.replace(
        'os.environ["PIPE"]', repr(str(inside(rootfs, mount.container_path)))
    )
    seen = json.loads(tenant_container.run(rootfs, [mount], program))
    assert seen == {
        "listing": ["control"],
        "unlink": "EROFS",
        "rename": "EROFS",
        "bind": "EROFS",
        "connect": "ok",
    }
    assert client_ok(node, b.uid), "B's next client still reaches the daemon"


def test_a_daemon_that_died_or_was_replaced_is_replaced_by_the_watch_with_an_event(node: Env) -> None:
    """Issue #20: after the daemon was gone, B's next client ran without MPS until the plugin restarted. The
    watch notices within a round and starts a new daemon, links every claim to it again, and says so."""
    a, b = node.put(
        claim("a", mps(0, memory="1Gi", cores="30")),
        claim("b", mps(0, memory="1Gi", cores="70")),
    )
    preparer = node.preparer()
    assert all(r.error is None for r in preparer.prepare([a, b]).values())
    control = MpsControl(root=node.paths.family_dir(mps_family.NAME), tool=str(MPS_CONTROL))
    events: list[tuple[str, str]] = []
    watch = MpsWatch(
        control=control,
        in_use=lambda: gpus_in_use(node.checkpoint()),
        lock=lambda: preparer.state.lock,
        warn=lambda *, reason, message: events.append((reason, message)),
    )
    assert watch.check_once() == [] and events == []

    old = daemons(node)[GPU0]
    assert old is not None and client_ok(node, b.uid)
    os.kill(old, signal.SIGKILL)  # died: its socket stays behind, a client's cuInit fails (805)
    assert not client_ok(node, b.uid)
    assert watch.check_once() == [FAKE_GPU0]
    new = daemons(node)[GPU0]
    assert new not in (None, old) and client_ok(node, b.uid)
    assert [r for r, _ in events] == [RECOVERED_REASON] and "not running" in events[0][1]

    # replaced behind our back (a host process binds its own socket at pipe/control): the links still name
    # the old socket; the watch sees the difference and starts a daemon everyone reaches again
    pipe = node.paths.family_dir(mps_family.NAME) / FAKE_GPU0 / "pipe"
    os.rename(pipe / "control", pipe / "moved")
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    impostor.bind(str(pipe / "control"))
    impostor.listen(1)
    try:
        assert watch.check_once() == [FAKE_GPU0]
    finally:
        impostor.close()
    assert [r for r, _ in events] == [RECOVERED_REASON] * 2
    assert client_ok(node, b.uid) and control.problem(gpu_uuid=GPU0) is None
    assert watch.check_once() == []
