"""The MPS watch: a control daemon that died, stops answering or was replaced is replaced, without a restart
of the node daemon, and the Node gets a Warning Event saying so.

Every INTERVAL it asks `MpsControl.problem` about each GPU that prepared MPS claims use (the checkpoint says
which: as on disk, so the claims another instance on the node prepared count too). A daemon found wanting is
restarted (`MpsControl.restart`: the old one killed, a new one started, every claim's link to its control
socket made again) under the locks the caller gives (the node daemon: its file lock and the node lock), so it
never races a prepare or the unprepare that stops the GPU's last daemon, once asked again under them: during
a rolling update the other instance's watch may have replaced it meanwhile, and a second restart would kill
the new daemon its clients just connected to.
Clients that were connected to the old daemon lost it with it (a fault of the GPU's MPS domain,
docs/mps.md); new processes of every MPS claim on the GPU get the new one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager

import structlog

from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin import metrics
from kubelet_plugin.host_parts.mps.control import MpsControl

log = structlog.get_logger(__name__)

INTERVAL_S = 2.0
RECOVERED_REASON = "MpsControlDaemonReplaced"
FAILED_REASON = "MpsControlDaemonDown"


class MpsWatch:
    def __init__(
        self,
        *,
        control: MpsControl,
        in_use: Callable[[], Collection[GpuUUID]],
        lock: Callable[[], AbstractContextManager[object]],
        warn: Callable[..., object] | None = None,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._control = control
        self._in_use = in_use
        self._lock = lock
        self._warn = warn
        self.interval_s = interval_s
        self.restarts = 0

    def check_once(self) -> list[GpuUUID]:
        """Replace every wanting daemon of a GPU in use; the GPUs whose daemon was replaced."""
        replaced = []
        for gpu in sorted(self._in_use()):
            if self._problem(gpu) is None:
                continue
            with self._lock():
                if gpu not in self._in_use():
                    continue  # its last claim left meanwhile: settling stops it
                problem = self._problem(gpu)
                if problem is None:
                    continue  # replaced meanwhile (the other instance's watch)
                try:
                    daemon = self._control.restart(gpu_uuid=gpu)
                except TesseraError as e:
                    metrics.MPS_RESTARTS.labels("failed").inc()
                    log.error("MPS control daemon not replaced", gpu=gpu, why=problem, error=str(e))
                    self._report(FAILED_REASON, f"GPU {gpu}: {problem}; replacing it failed: {e}")
                    continue
            self.restarts += 1
            metrics.MPS_RESTARTS.labels("replaced").inc()
            replaced.append(gpu)
            log.warning("MPS control daemon replaced", gpu=gpu, why=problem, pid=daemon.pid)
            self._report(
                RECOVERED_REASON,
                f"GPU {gpu}: {problem}; a new control daemon (pid {daemon.pid}) serves its MPS claims; "
                "processes connected to the old one lost their MPS server",
            )
        return replaced

    def _problem(self, gpu: GpuUUID) -> str | None:
        try:
            return self._control.problem(gpu_uuid=gpu)
        except TesseraError as e:
            return str(e)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.check_once()
            except Exception:  # one bad round must not end the watch
                log.exception("MPS watch round failed")

    def _report(self, reason: str, message: str) -> None:
        if self._warn is not None:
            try:
                self._warn(reason=reason, message=message)
            except Exception as e:  # an Event is for humans: never stops the watch
                log.warning("MPS event not posted", reason=reason, error=str(e))
