"""How the vgpu loops (the burst arbiter, the priority relay) pace their rounds: every POLL while they have
something to watch, otherwise asleep until woken.

Most nodes share no GPU most of the time, and a round every 10 ms for nothing cost an idle daemon 3.5 CPU-s a
minute (issue #35). So a round says whether its loop has work (the arbiter: a GPU whose layout can still
change; the relay: a GPU with a high-priority claim). With work, the next round follows after POLL, as the
modules' promises need; without, the loop sleeps until its `wake` event is set (`GpuSharing.refresh` sets it
after every change of the shared GPUs, and the daemon sets it when it stops) or FALLBACK_S passes, so that
nothing depends on a wake-up never being missed: a claim prepared while the loop sleeps is watched within
FALLBACK_S at worst, at once through the event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

FALLBACK_S = 1.0


def pace(
    stop: threading.Event,
    one_round: Callable[[], bool],
    *,
    poll_s: float,
    wake: threading.Event | None,
    what: str,
) -> None:
    """Runs `one_round` until `stop` is set: again after `poll_s` while it returns True (work to watch),
    else once `wake` is set or after FALLBACK_S. Without `wake`, every POLL (a check run by hand). A round
    that raises is logged and taken to have work: one bad round must not end the loop."""
    while True:
        if wake is not None:
            wake.clear()  # before `stop` is read: a stop (which sets `wake` after) cannot be slept through
        if stop.is_set():
            return
        try:
            busy = one_round()
        except Exception:  # the views keep their last layout, holds expire alone
            log.exception(f"{what} round failed")
            busy = True
        if busy or wake is None:
            stop.wait(poll_s)
        else:
            wake.wait(FALLBACK_S)
