"""The node's MPS control daemons: one `nvidia-cuda-mps-control` per GPU that MPS claims use (I/O adapter).

Each GPU gets `<root>/<GPU UUID>/` holding `pipe/` (its CUDA_MPS_PIPE_DIRECTORY: the control sockets, which no
container gets), `clients/<claim uid>/` (a link to `control` alone, mounted read-only into the claim's
containers: `kubelet_plugin.host_parts.mps.clients`), `log/` (its CUDA_MPS_LOG_DIRECTORY: control.log,
server.log, and start.log with what `-d` printed) and `daemon.json` (the record,
`kubelet_plugin.host_parts.mps.record`). A daemon is started with CUDA_VISIBLE_DEVICES=<GPU UUID> in a session
of its own, so it outlives a restart of the node daemon, which then adopts it (`ensure`) once it answers on
its pipe; `problem` and `restart` serve the watch (`kubelet_plugin.host_parts.mps.watch`) that replaces a
daemon that died or was replaced. The tool is
driven through its command line only, as an administrator would (the control protocol is not public): `-d`
starts it, commands on stdin ask it. What MPS does and costs: docs/mps.md.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.core.families.mps import CONTROL_TOOL
from dra_driver.io.files import atomic_write, fsync_dir, read_bounded, remove_durably
from dra_driver.io.safe_tree import remove_tree
from dra_driver.vocabulary.errors import MpsError, MpsToolError, StorageError
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.host_parts.mps.clients import MpsClientDirs
from kubelet_plugin.host_parts.mps.record import (
    MAX_RECORD_BYTES,
    MpsRecord,
    decode,
    encode,
    format_pinned_limit,
    parse_pinned_limit,
    parse_thread_percentage,
    shown_pinned_limit,
)
from kubelet_plugin.node.file_modes import make_dir
from kubelet_plugin.node.host_launch import HostLauncher
from kubelet_plugin.node.host_process import end_process, is_live_process, wait_gone

# An MPS server runs on the host as its clients' uid and must reach its pipe directory by path (a 0700 parent
# stops every non-root server), so the tree is traversable; only root writes in it.
MPS_ROOT_MODE = 0o755
MPS_GPU_DIR_MODE = 0o755  # one per GPU: pipe/, log/, the daemon's record
MPS_PIPE_DIR_MODE = 0o755  # the daemon's sockets (control 0666, control_privileged 0600); never mounted
MPS_LOG_DIR_MODE = 0o755  # control.log, server.log: for humans and `kubectl debug`
MPS_RECORD_MODE = 0o600

DEFAULT_TOOL = CONTROL_TOOL
PID_FILE = "nvidia-cuda-mps-control.pid"  # the daemon writes it into its pipe directory
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
LONGEST_SOCKET = "control_privileged"  # of the daemon's sockets in its pipe directory (the other: control)
PROBE = "get_default_active_thread_percentage"  # any live daemon answers it with a number; it changes nothing
_DAEMON_COMM = "nvidia-cuda-mps"  # the kernel's 15-character name of nvidia-cuda-mps-control
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class MpsDirs:
    gpu_dir: Path

    @property
    def pipe_dir(self) -> Path:
        return self.gpu_dir / "pipe"

    @property
    def log_dir(self) -> Path:
        return self.gpu_dir / "log"

    @property
    def record(self) -> Path:
        return self.gpu_dir / "daemon.json"

    @property
    def control_log(self) -> Path:
        return self.log_dir / "control.log"


@dataclass(frozen=True, slots=True)
class MpsDaemon:
    gpu_uuid: GpuUUID
    pid: int
    dirs: MpsDirs
    adopted: bool  # it was running already (started before a restart of the node daemon)


@dataclass(frozen=True, slots=True)
class MpsDaemonState:
    """What start-up reconciliation finds for one GPU directory."""

    gpu_uuid: GpuUUID
    pid: int | None  # a live control daemon on this GPU's pipe directory
    answering: bool


class MpsControl:
    """Starts, adopts and stops the control daemons under `root`; one call per GPU at a time."""

    def __init__(
        self,
        *,
        root: Path,
        tool: str = DEFAULT_TOOL,
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
        command_timeout_s: float = 5.0,
        environ: Mapping[str, str] | None = None,
        launcher: HostLauncher | None = None,
    ) -> None:
        self._root = root
        self._tool = tool
        self._start_timeout = start_timeout_s
        self._stop_timeout = stop_timeout_s
        self._command_timeout = command_timeout_s
        self._environ = dict(os.environ if environ is None else environ)
        self._launcher = launcher  # None: daemons start in this process's namespaces and cgroup
        self._locks: dict[GpuUUID, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @property
    def root(self) -> Path:
        return self._root

    @property
    def tool(self) -> str:
        return self._tool

    @property
    def launcher(self) -> HostLauncher | None:
        return self._launcher

    def dirs(self, gpu_uuid: GpuUUID) -> MpsDirs:
        if not gpu_uuid or "/" in gpu_uuid or gpu_uuid.startswith("."):
            raise MpsError(f"{gpu_uuid!r} is not a GPU UUID")
        return MpsDirs(self._root / gpu_uuid)

    # ---- the three operations ----

    def ensure(self, *, gpu_uuid: GpuUUID) -> MpsDaemon:
        """The GPU's control daemon, started unless one already answers on its pipe (then it is adopted)."""
        dirs = self.dirs(gpu_uuid)
        socket = dirs.pipe_dir / LONGEST_SOCKET
        if len(os.fsencode(socket)) > SOCKET_PATH_MAX:
            raise MpsError(
                f"the MPS control socket {socket} would be {len(os.fsencode(socket))} bytes long, more "
                f"than a unix socket path may be ({SOCKET_PATH_MAX}); use a shorter MPS host directory "
                f"than {self._root}"
            )
        with self._locked(gpu_uuid):
            answering, pid = self._answers(dirs), self._daemon_pid(dirs)
            if answering and pid is not None:
                self._save_record(dirs, gpu_uuid, pid, replace=False)
                return MpsDaemon(gpu_uuid=gpu_uuid, pid=pid, dirs=dirs, adopted=True)
            if answering:
                raise MpsError(
                    f"an MPS control daemon answers on {dirs.pipe_dir} but no process matches its pid "
                    f"file; stop it (echo quit | CUDA_MPS_PIPE_DIRECTORY={dirs.pipe_dir} {self._tool}) "
                    "and prepare again"
                )
            if pid is not None:
                log.warning("MPS control daemon does not answer; replacing it", gpu=gpu_uuid, pid=pid)
                self._kill(pid)
            return self._start(gpu_uuid, dirs)

    def clients(self, gpu_uuid: GpuUUID) -> MpsClientDirs:
        return MpsClientDirs(gpu_dir=self.dirs(gpu_uuid).gpu_dir)

    def problem(self, *, gpu_uuid: GpuUUID) -> str | None:
        """Why the GPU's daemon cannot serve its clients now (None: it can): dead, mute, or its socket is not
        the one the clients' links name (replaced)."""
        dirs = self.dirs(gpu_uuid)
        with self._locked(gpu_uuid):
            pid = self._daemon_pid(dirs)
            if pid is None:
                return "its control daemon is not running"
            if not self._answers(dirs):
                return f"its control daemon (pid {pid}) does not answer"
            stale = self.clients(gpu_uuid).stale()
            if stale:
                return f"its control socket is not the one linked for claim {stale[0]} (replaced or removed)"
        return None

    def restart(self, *, gpu_uuid: GpuUUID) -> MpsDaemon:
        """A new daemon for the GPU, whatever answers now (killed), and every claim's link to its socket."""
        dirs = self.dirs(gpu_uuid)
        with self._locked(gpu_uuid):
            pid = self._daemon_pid(dirs)
            if pid is not None:
                self._kill(pid)
            daemon = self._start(gpu_uuid, dirs)
            self.clients(gpu_uuid).link_all()
        return daemon

    def stop(self, *, gpu_uuid: GpuUUID) -> bool:
        """Quit the GPU's daemon (killed if it does not go) and remove its directories; False if none."""
        dirs = self.dirs(gpu_uuid)
        with self._locked(gpu_uuid):
            if not os.path.lexists(dirs.gpu_dir):
                return False
            pid = self._daemon_pid(dirs)
            if pid is not None:
                self._quit(dirs, pid)
            self._remove(dirs)
            log.info("MPS control daemon stopped", gpu=gpu_uuid, pid=pid)
            return True

    def running(self) -> tuple[MpsDaemonState, ...]:
        """Every GPU directory under the root, with its daemon if one lives (start-up reconciliation)."""
        try:
            names = sorted(e.name for e in os.scandir(self._root) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return ()
        except OSError as e:
            raise StorageError(f"listing the MPS directory {self._root}: {e.strerror or e}") from e
        out = []
        for name in names:
            gpu = GpuUUID(name)
            dirs = self.dirs(gpu)
            pid = self._daemon_pid(dirs)
            out.append(
                MpsDaemonState(gpu_uuid=gpu, pid=pid, answering=pid is not None and self._answers(dirs))
            )
        return tuple(out)

    def set_default_limits(
        self,
        *,
        gpu_uuid: GpuUUID,
        active_thread_percentage: float | None = None,
        pinned_memory_bytes: int | None = None,
    ) -> None:
        """Server defaults: the ceiling every client of a server started from now on gets (clients' own
        CUDA_MPS_* variables can only lower it). A running server keeps what it started with."""
        dirs = self.dirs(gpu_uuid)
        commands, checks = [], []
        if active_thread_percentage is not None:
            commands.append(f"set_default_active_thread_percentage {active_thread_percentage:g}")
            checks.append(("get_default_active_thread_percentage", active_thread_percentage))
        if pinned_memory_bytes is not None:
            commands.append(
                f"set_default_device_pinned_mem_limit 0 {format_pinned_limit(pinned_memory_bytes)}"
            )
            checks.append(("get_default_device_pinned_mem_limit 0", pinned_memory_bytes))
        with self._locked(gpu_uuid):
            self._ask(dirs, commands)  # a set answers with the value or nothing: read back separately
            answers = self._ask(dirs, [c for c, _ in checks])
        for (command, wanted), got in zip(checks, answers, strict=True):
            try:
                ok = (
                    abs(parse_thread_percentage(got) - float(wanted)) < 0.05
                    if command.endswith("percentage")
                    else parse_pinned_limit(got) == shown_pinned_limit(int(wanted))
                )
            except ValueError as e:
                raise MpsError(
                    f"MPS on {gpu_uuid}: `{command}` answered {got!r} ({e}); see {dirs.control_log}"
                ) from e
            if not ok:
                raise MpsError(f"MPS on {gpu_uuid}: `{command}` reads {got!r} after setting {wanted}")

    # ---- the tool ----

    def _env(self, dirs: MpsDirs, gpu_uuid: GpuUUID | None = None) -> dict[str, str]:
        env = {
            k: v for k, v in self._environ.items() if not k.startswith(("CUDA_MPS_", "CUDA_VISIBLE_DEVICES"))
        }
        env.update(CUDA_MPS_PIPE_DIRECTORY=str(dirs.pipe_dir), CUDA_MPS_LOG_DIRECTORY=str(dirs.log_dir))
        if gpu_uuid is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
        return env

    def _tool_error(self, e: OSError) -> MpsToolError:
        return MpsToolError(
            f"the MPS control tool {self._tool!r} cannot be run ({e.strerror or e}): install the NVIDIA "
            "driver's utilities on the node or point the plugin's --mps-control at the tool"
        )

    def _ask(self, dirs: MpsDirs, commands: Sequence[str]) -> list[str]:
        """The answers (one line each) of the GPU's daemon to `commands`."""
        try:
            done = subprocess.run(
                [self._tool],
                input="".join(f"{c}\n" for c in commands),
                env=self._env(dirs),
                capture_output=True,
                text=True,
                timeout=self._command_timeout,
                check=False,
            )
        except OSError as e:
            raise self._tool_error(e) from e
        except subprocess.TimeoutExpired as e:
            raise MpsError(
                f"the MPS control daemon on {dirs.pipe_dir} did not answer within "
                f"{self._command_timeout:g} s; see {dirs.control_log}"
            ) from e
        if done.returncode != 0:
            raise MpsError(
                f"no MPS control daemon answers on {dirs.pipe_dir} (exit status {done.returncode}: "
                f"{done.stderr.strip()[:200]!r}); see {dirs.control_log}"
            )
        return done.stdout.splitlines()

    def _answers(self, dirs: MpsDirs) -> bool:
        if not os.path.lexists(dirs.pipe_dir / "control"):
            return False
        try:
            out = self._ask(dirs, [PROBE])
            return len(out) == 1 and parse_thread_percentage(out[0]) > 0
        except MpsToolError:
            raise
        except (MpsError, ValueError):
            return False

    def _start(self, gpu_uuid: GpuUUID, dirs: MpsDirs) -> MpsDaemon:
        remove_tree(dirs.pipe_dir)  # a dead daemon's socket would make its clients fail (805)
        make_dir(self._root, MPS_ROOT_MODE)
        make_dir(dirs.gpu_dir, MPS_GPU_DIR_MODE)
        make_dir(dirs.pipe_dir, MPS_PIPE_DIR_MODE)
        make_dir(dirs.log_dir, MPS_LOG_DIR_MODE)
        out = dirs.log_dir / "start.log"
        try:
            argv = [self._tool, "-d"]
            env = self._env(dirs, gpu_uuid)
            if self._launcher is not None:
                argv = self._launcher.command(argv)
                env.update(self._launcher.env)
            with open(out, "ab") as sink:
                done = subprocess.run(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=sink,
                    start_new_session=True,
                    timeout=self._start_timeout,
                    check=False,
                )
        except OSError as e:
            raise self._tool_error(e) from e
        except subprocess.TimeoutExpired as e:
            raise MpsError(
                f"`{self._tool} -d` for {gpu_uuid} did not return within {self._start_timeout:g} s; "
                f"see {out} and {dirs.control_log}"
            ) from e
        if done.returncode != 0:
            said = out.read_text(errors="replace").strip().splitlines()[-1:] if out.exists() else []
            raise MpsError(
                f"the MPS control daemon for {gpu_uuid} would not start (`{self._tool} -d` exited with "
                f"status {done.returncode}: {' '.join(said)!r}); see {out} and {dirs.control_log}"
            )
        deadline = time.monotonic() + self._start_timeout
        while not self._answers(dirs):
            if time.monotonic() > deadline:
                pid = self._daemon_pid(dirs)
                if pid is not None:
                    self._kill(pid)
                raise MpsError(
                    f"the MPS control daemon for {gpu_uuid} started but does not answer on "
                    f"{dirs.pipe_dir}; see {dirs.control_log}"
                )
            time.sleep(0.05)
        pid = self._daemon_pid(dirs)
        if pid is None:
            raise MpsError(
                f"the MPS control daemon for {gpu_uuid} answers but wrote no usable "
                f"{dirs.pipe_dir / PID_FILE}; see {dirs.control_log}"
            )
        if self._launcher is not None:
            try:
                self._launcher.adopt(pid)
            except MpsError:
                self._kill(pid)
                raise
        self._save_record(dirs, gpu_uuid, pid, replace=True)
        log.info("MPS control daemon started", gpu=gpu_uuid, pid=pid, pipe=str(dirs.pipe_dir))
        return MpsDaemon(gpu_uuid=gpu_uuid, pid=pid, dirs=dirs, adopted=False)

    def _quit(self, dirs: MpsDirs, pid: int) -> None:
        try:
            self._ask(dirs, ["quit"])
            if wait_gone(pid, self._stop_timeout):
                return
        except MpsToolError as e:
            log.warning("cannot ask the MPS control daemon to quit", pid=pid, error=str(e))
        except MpsError as e:
            log.warning("the MPS control daemon did not take `quit`", pid=pid, error=str(e))
        log.warning("MPS control daemon did not quit; killing it", pid=pid, log=str(dirs.control_log))
        self._kill(pid)

    def _kill(self, pid: int) -> None:
        if not end_process(pid):
            raise MpsError(f"the MPS control daemon (pid {pid}) survives SIGKILL")

    # ---- files ----

    def _daemon_pid(self, dirs: MpsDirs) -> int | None:
        """The live control daemon of this pipe directory: its pid file's, else the record's; None."""
        candidates = []
        with contextlib.suppress(FileNotFoundError, StorageError, ValueError):
            candidates.append(int(read_bounded(dirs.pipe_dir / PID_FILE, max_bytes=64)))
        record = self._load_record(dirs)
        if record is not None:
            candidates.append(record.pid)
        mark = f"CUDA_MPS_PIPE_DIRECTORY={dirs.pipe_dir}"
        return next((p for p in candidates if is_live_process(p, env_entry=mark, comm=_DAEMON_COMM)), None)

    def _load_record(self, dirs: MpsDirs) -> MpsRecord | None:
        try:
            return decode(read_bounded(dirs.record, max_bytes=MAX_RECORD_BYTES), source=str(dirs.record))
        except FileNotFoundError:
            return None
        except StorageError as e:
            log.warning("MPS record unreadable; ignoring it", error=str(e))
            return None

    def _save_record(self, dirs: MpsDirs, gpu_uuid: GpuUUID, pid: int, *, replace: bool) -> None:
        current = self._load_record(dirs)
        if not replace and current is not None and current.pid == pid:
            return
        record = MpsRecord(gpu_uuid=gpu_uuid, pid=pid, tool=self._tool, started_ns=time.time_ns())
        atomic_write(dirs.record, encode(record), mode=MPS_RECORD_MODE)

    def _remove(self, dirs: MpsDirs) -> None:
        remove_tree(dirs.gpu_dir / "clients")
        remove_tree(dirs.pipe_dir)  # removed without following links
        remove_tree(dirs.log_dir)
        remove_durably(dirs.record)
        try:
            os.rmdir(dirs.gpu_dir)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"removing {dirs.gpu_dir}: {e.strerror or e}") from e
        fsync_dir(self._root)

    @contextlib.contextmanager
    def _locked(self, gpu_uuid: GpuUUID) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault(gpu_uuid, threading.Lock())
        with lock:
            yield
