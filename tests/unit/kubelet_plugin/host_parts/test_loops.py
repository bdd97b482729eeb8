"""A host part brings its own background loops; the daemon starts whatever every part returns, by name, and
knows no family's loop (the MPS watch and the priority relay used to be wired in by hand)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from kubelet_plugin.host_parts import Hosts
from kubelet_plugin.host_parts.base import HostContext, Running
from kubelet_plugin.host_parts.mps import MpsHost
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint
from kubelet_plugin.record.steps import NO_OBSERVER
from tests.support.inventories import make_gpu, make_inventory


class Backend:
    def inventory(self) -> object:
        return make_inventory(make_gpu(0, "H100-80GB-SXM"))

    def close(self) -> None:
        pass


@contextlib.contextmanager
def nothing_held() -> Iterator[None]:
    yield


def test_each_part_names_its_loops_and_the_rest_have_none(tmp_path: Path) -> None:
    hosts = Hosts(HostContext(backend=Backend(), paths=PluginPaths.under(tmp_path), steps=NO_OBSERVER))  # type: ignore[arg-type]
    seen: list[str] = []
    running = Running(checkpoint=lambda: Checkpoint(boot_id="b"), exclusive=nothing_held)
    loops = {part.family: [loop.name for loop in part.loops(running)] for part in hosts}
    for names in loops.values():
        seen.extend(names)
    assert loops == {"gpu": [], "vgpu": ["priority-relay", "burst-arbiter"], "mps": ["mps-watch"], "mig": []}
    assert len(seen) == len(set(seen))  # thread names stay unique
    hosts.close()


def test_the_mps_watch_reads_the_checkpoint_the_daemon_gives_it(tmp_path: Path) -> None:
    hosts = Hosts(HostContext(backend=Backend(), paths=PluginPaths.under(tmp_path), steps=NO_OBSERVER))  # type: ignore[arg-type]
    part = next(p for p in hosts if isinstance(p, MpsHost))
    asked = threading.Event()

    def checkpoint() -> Checkpoint | None:
        asked.set()
        return None  # unreadable just now: the watch must treat it as "no GPU in use", not fail

    (loop,) = part.loops(Running(checkpoint=checkpoint, exclusive=nothing_held))
    assert part.watch is not None
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    assert asked.wait(5.0), "the watch never asked which GPUs are in use"
    stop.set()
    thread.join(5.0)
    assert not thread.is_alive()
    hosts.close()
