"""The real node's PID and mount namespaces (holder.sh says why), and the processes started inside them.

`unshare` makes the namespaces with holder.sh as their PID 1; components are started with `nsenter`, which
forks into the PID namespace, so a component's pid is the child of that nsenter (its host pid is what we
signal). Every process here dies with the test run: the unshare and nsenter processes get SIGKILL when their
parent dies, the namespaces' PID 1 gets it when unshare dies (`--kill-child`), and the kernel kills the rest
of the PID namespace with its PID 1."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from e2e.controlplane.processes import is_alive, log_tail
from e2e.realnode.errors import RealNodeError

log = structlog.get_logger(__name__)

HOLDER_SCRIPT = Path(__file__).resolve().parent / "holder.sh"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _argv0(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None


@dataclass(frozen=True, slots=True)
class NodeProcess:
    """A component running in the namespaces: `pid` is its host pid, `wrapper` the nsenter that started it."""

    name: str
    pid: int
    binary: str
    log: Path
    wrapper: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return is_alive(self.pid) and _argv0(self.pid) == self.binary

    def signal(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def stop(self, *, grace_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; returns once it is gone."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            log.warning("realnode.kill", component=self.name, pid=self.pid)
            self.signal(signal.SIGKILL)
        self.wait_gone()

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the component can tell."""
        self.signal(signal.SIGKILL)
        self.wait_gone()

    def wait_gone(self) -> None:
        while self.alive():
            time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wrapper.wait(timeout=5)


class NodeNamespaces:
    def __init__(self, *, root: Path, init: Path, tunables: Sequence[str]) -> None:
        self.root = root
        self.init = init
        self.tunables = tuple(tunables)
        self._unshare: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None

    @property
    def ready_file(self) -> Path:
        return self.root / "namespaces.ready"

    @property
    def log(self) -> Path:
        return self.root / "logs" / "namespaces.log"

    def start(self, *, timeout_s: float = 15.0) -> None:
        self.ready_file.unlink(missing_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            "unshare",
            "--mount",
            "--propagation=private",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--",
            "bash",
            str(HOLDER_SCRIPT),
            str(self.root),
            str(self.init),
            *self.tunables,
        ]
        with self.log.open("ab") as out:
            try:
                self._unshare = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl
                )
            except OSError as e:
                raise RealNodeError(f"cannot run unshare (util-linux): {e}") from e
        deadline = time.monotonic() + timeout_s
        while not self.ready_file.exists():
            if self._unshare.poll() is not None:
                raise RealNodeError(
                    "the node's namespaces could not be set up "
                    f"(unshare exited {self._unshare.returncode}):\n{log_tail(self.log)}"
                )
            if time.monotonic() > deadline:
                raise RealNodeError(f"the node's namespaces were not ready within {timeout_s}s")
            time.sleep(0.05)
        children = _children(self._unshare.pid)
        if len(children) != 1:
            raise RealNodeError(f"unshare {self._unshare.pid} has children {children}, expected its PID 1")
        self.init_pid = children[0]
        log.info("realnode.namespaces", root=str(self.root), init_pid=self.init_pid)

    def alive(self) -> bool:
        return self._unshare is not None and self._unshare.poll() is None

    def spawn(
        self,
        *,
        name: str,
        binary: Path,
        args: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> NodeProcess:
        """Starts `binary args` inside the namespaces, output appended to `log_path`."""
        if self.init_pid is None or not self.alive():
            raise RealNodeError("the node's namespaces are not running")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = ["nsenter", f"--target={self.init_pid}", "--mount", "--pid", "--", str(binary), *args]
        with log_path.open("ab") as out:
            wrapper = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl
            )
        deadline = time.monotonic() + timeout_s
        while True:
            kids = _children(wrapper.pid)
            if kids and _argv0(kids[0]) == str(binary):
                process = NodeProcess(
                    name=name, pid=kids[0], binary=str(binary), log=log_path, wrapper=wrapper
                )
                log.info("realnode.started", component=name, pid=process.pid, log=str(log_path))
                return process
            if wrapper.poll() is not None:
                raise RealNodeError(f"{name} exited at once ({wrapper.returncode}):\n{log_tail(log_path)}")
            if time.monotonic() > deadline:
                raise RealNodeError(f"{name} did not start within {timeout_s}s")
            time.sleep(0.02)

    def bind(self, source: Path, target: Path) -> None:
        """A bind mount in the node's mount namespace (`target` must exist)."""
        if self.init_pid is None or not self.alive():
            raise RealNodeError("the node's namespaces are not running")
        argv = [
            "nsenter",
            f"--target={self.init_pid}",
            "--mount",
            "--",
            "mount",
            "--bind",
            str(source),
            str(target),
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        if done.returncode != 0:
            raise RealNodeError(f"mount --bind {source} {target} in the node failed: {done.stderr.strip()}")

    def stop(self) -> None:
        """Kills PID 1 of the namespaces: the kernel kills every process left in them."""
        if self._unshare is None:
            return
        if self.init_pid is not None and is_alive(self.init_pid) and _argv0(self.init_pid) == str(self.init):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        try:
            self._unshare.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._unshare.kill()
            self._unshare.wait()
        self._unshare = None
        self.init_pid = None
