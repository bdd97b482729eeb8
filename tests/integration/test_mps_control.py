"""The node's MPS control adapter against the fake nvidia-cuda-mps-control (interceptor/build, from
`make dev`), in temporary directories: start, adoption after the adapter is created again (a restart of the
node daemon), stop, leftovers, a stuck daemon, a tool that is missing or broken. MPS clients are the fake
libcuda's tmps."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.vocabulary.errors import MpsError, MpsToolError
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.host_parts.mps.control import MpsControl
from kubelet_plugin.host_parts.mps.record import decode
from tests.support.doubles.interceptor_programs import FAKE_GPU0, FAKE_GPU1, MPS_CONTROL, TMPS, env

GPU0, GPU1 = GpuUUID(FAKE_GPU0), GpuUUID(FAKE_GPU1)
pytestmark = pytest.mark.skipif(not MPS_CONTROL.exists(), reason="run `make dev` to build the fake MPS tool")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def root() -> Iterator[Path]:
    # short: the control socket's path must fit a unix socket address (108 bytes)
    d = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))
    yield d
    for pid_file in d.glob("*/pipe/nvidia-cuda-mps-control.pid"):  # daemons a test left running
        pid = int(pid_file.read_text())
        if alive(pid) and Path(f"/proc/{pid}/comm").read_text().strip() == "nvidia-cuda-mps":
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(d, ignore_errors=True)


def tool_environ() -> dict[str, str]:
    """The plugin's environment with the fake tool found on PATH, as the default tool name is."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "FAKE_"))}
    e["PATH"] = f"{MPS_CONTROL.parent}:{e.get('PATH', '/usr/bin:/bin')}"
    return e


def control(root: Path, **kw: float | str) -> MpsControl:
    return MpsControl(root=root, environ=tool_environ(), **kw)  # type: ignore[arg-type]


def client(root: Path, gpu: GpuUUID, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """An MPS client (the fake libcuda's tmps) of the GPU's daemon, as a container would run one."""
    e = env(None, root / "gpu-state", CUDA_MPS_PIPE_DIRECTORY=str(root / gpu / "pipe"), **extra)
    return subprocess.run([str(TMPS), *args], env=e, capture_output=True, text=True, timeout=30, check=False)


def ask(root: Path, gpu: GpuUUID, *commands: str) -> str:
    e = {"CUDA_MPS_PIPE_DIRECTORY": str(root / gpu / "pipe"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(MPS_CONTROL)], input="".join(f"{c}\n" for c in commands), env=e, capture_output=True, text=True,
        timeout=10, check=True,
    )  # fmt: skip
    return done.stdout


def test_ensure_starts_one_daemon_per_gpu_that_serves_clients(root: Path) -> None:
    mps = control(root)
    d1 = mps.ensure(gpu_uuid=GPU1)
    assert not d1.adopted and alive(d1.pid)
    assert os.getsid(d1.pid) != os.getsid(0), "the daemon has a session of its own"
    assert (root / GPU1 / "pipe" / "control").is_socket()
    assert "Starting control daemon using socket" in (root / GPU1 / "log" / "control.log").read_text()
    record = decode((root / GPU1 / "daemon.json").read_bytes(), source="record")
    assert (record.gpu_uuid, record.pid, record.tool) == (GPU1, d1.pid, "nvidia-cuda-mps-control")
    # CUDA_VISIBLE_DEVICES=<uuid> given to the daemon: its clients see that GPU, and only it, as device 0
    done = client(root, GPU1, "view", "1", FAKE_GPU1)
    assert done.returncode == 0, done.stdout + done.stderr
    d0 = mps.ensure(gpu_uuid=GPU0)
    assert d0.pid != d1.pid and client(root, GPU0, "view", "1", FAKE_GPU0).returncode == 0
    assert mps.ensure(gpu_uuid=GPU1).pid == d1.pid


def test_a_restarted_node_daemon_adopts_the_running_daemon_and_its_clients(root: Path) -> None:
    first = control(root).ensure(gpu_uuid=GPU0)
    e = env(None, root / "gpu-state", CUDA_MPS_PIPE_DIRECTORY=str(root / GPU0 / "pipe"))
    holder = subprocess.Popen([str(TMPS), "hold", "3"], env=e, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("ready")
        again = control(root).ensure(gpu_uuid=GPU0)  # a new adapter, as after a restart
        assert (again.pid, again.adopted) == (first.pid, True)
        server = ask(root, GPU0, "get_server_list").strip()
        assert ask(root, GPU0, f"get_client_list {server}").split() == [str(holder.pid)]
    finally:
        holder.wait(timeout=10)


def test_concurrent_ensures_start_one_daemon(root: Path) -> None:
    mps = control(root)
    pids: list[int] = []
    threads = [threading.Thread(target=lambda: pids.append(mps.ensure(gpu_uuid=GPU0).pid)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(pids)) == 1 and len(pids) == 4


def test_stop_quits_the_daemon_and_removes_its_directories(root: Path) -> None:
    mps = control(root)
    pid = mps.ensure(gpu_uuid=GPU0).pid
    mps.ensure(gpu_uuid=GPU1)
    assert mps.stop(gpu_uuid=GPU0)
    assert not alive(pid) and not (root / GPU0).exists()
    assert [s.gpu_uuid for s in mps.running()] == [GPU1]
    assert not mps.stop(gpu_uuid=GPU0)
    # no daemon on the pipe directory any more: a client runs without MPS
    assert client(root, GPU0, "init", "0").returncode == 0


def test_a_killed_daemons_leftovers_are_reported_replaced_and_cleaned(root: Path) -> None:
    mps = control(root)
    pid = mps.ensure(gpu_uuid=GPU0).pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    (state,) = mps.running()
    assert (state.gpu_uuid, state.pid, state.answering) == (GPU0, None, False)
    # what a container on that GPU meets meanwhile: its cuInit fails with CUDA_ERROR_MPS_CONNECTION_FAILED
    done = client(root, GPU0, "init", "805")
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = mps.ensure(gpu_uuid=GPU0)
    assert fresh.pid != pid and not fresh.adopted
    assert client(root, GPU0, "init", "0").returncode == 0
    os.kill(fresh.pid, signal.SIGKILL)
    assert mps.stop(gpu_uuid=GPU0) and not (root / GPU0).exists()


def test_a_stuck_daemon_is_killed_on_stop_and_replaced_on_ensure(root: Path) -> None:
    mps = control(root, command_timeout_s=1.0, stop_timeout_s=1.0)
    pid = mps.ensure(gpu_uuid=GPU0).pid
    os.kill(pid, signal.SIGSTOP)
    replaced = mps.ensure(gpu_uuid=GPU0)
    assert replaced.pid != pid and not alive(pid)
    os.kill(replaced.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    assert mps.stop(gpu_uuid=GPU0)
    assert time.monotonic() - t0 < 8
    assert not alive(replaced.pid) and not (root / GPU0).exists()


def test_stop_kills_a_daemon_whose_clients_never_leave(root: Path) -> None:
    mps = control(root, stop_timeout_s=1.0)
    pid = mps.ensure(gpu_uuid=GPU0).pid
    e = env(None, root / "gpu-state", CUDA_MPS_PIPE_DIRECTORY=str(root / GPU0 / "pipe"))
    holder = subprocess.Popen([str(TMPS), "hold", "30"], env=e, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("ready")
        server = int(ask(root, GPU0, "get_server_list"))
        assert mps.stop(gpu_uuid=GPU0)  # `quit` waits for the client; the adapter does not
        assert not alive(pid) and not alive(server) and not (root / GPU0).exists()
    finally:
        holder.kill()
        holder.wait()


def test_server_defaults_bind_clients_started_later(root: Path) -> None:
    mps = control(root)
    mps.ensure(gpu_uuid=GPU0)
    mps.set_default_limits(gpu_uuid=GPU0, active_thread_percentage=30, pinned_memory_bytes=1536 << 20)
    assert ask(root, GPU0, "get_default_device_pinned_mem_limit 0").strip() == "1G"  # shown in whole GiB
    done = client(root, GPU0, "pinned", str(1536 << 20), CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=4G")
    assert done.returncode == 0, done.stdout + done.stderr
    with pytest.raises(MpsError, match="no MPS control daemon answers"):
        mps.set_default_limits(gpu_uuid=GPU1, active_thread_percentage=50)


def test_a_missing_tool_is_named_with_the_fix(root: Path) -> None:
    for tool in ("/nonexistent/nvidia-cuda-mps-control", "nvidia-cuda-mps-control"):
        mps = MpsControl(root=root, tool=tool, environ={"PATH": "/nonexistent"})
        with pytest.raises(MpsToolError, match=r"cannot be run .*--mps-control"):
            mps.ensure(gpu_uuid=GPU0)
    assert [s.pid for s in control(root).running()] == [None]


def test_a_daemon_that_will_not_start_says_where_its_log_is(root: Path) -> None:
    broken = root / "broken-tool"
    broken.write_text("#!/bin/sh\necho 'Failed to start: no devices found' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(MpsError, match=r"would not start .*no devices found.*start\.log and .*control\.log"):
        MpsControl(root=root, tool=str(broken)).ensure(gpu_uuid=GPU0)
    silent = root / "silent-tool"
    silent.write_text("#!/bin/sh\nexit 0\n")  # returns as if it started, and nothing answers
    silent.chmod(0o755)
    with pytest.raises(MpsError, match=r"does not answer on .*control\.log"):
        MpsControl(root=root, tool=str(silent), start_timeout_s=0.5).ensure(gpu_uuid=GPU0)


def test_a_socket_path_too_long_for_unix_sockets_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 80)
    with pytest.raises(MpsError, match="shorter MPS host directory"):
        control(deep).ensure(gpu_uuid=GPU0)
    assert not deep.exists()
