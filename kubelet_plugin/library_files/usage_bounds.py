"""What a claim's region may say, physically: its numbers are clipped to these bounds before they reach a
metric or a claim's status.

The region is written by the claim's containers, so any number in it may be forged (issue #20 saw
`memory_used_bytes 7.38e19`, `launches_total 1.8e19` and `memoryUsed: 70368744177664Mi`). No process holds
more bytes than its GPU has; no counter of time can grow faster than wall time in each of the claim's
processes (at most MAX_PROCS) since the node booted; no process makes a driver call (a launch, a refused
allocation) in less than MIN_CALL_NS. Within these bounds a tenant can still misreport its own usage, which
only misleads about itself: limits and arbitration never read the region (docs/security.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from dra_driver.libtessera.region_layout import MAX_PROCS, RegionGpu

MIN_CALL_NS = 1_000  # a driver call takes microseconds at least


@dataclass(frozen=True, slots=True)
class UsageBounds:
    gpu_memory_bytes: int  # the GPU's, from the inventory
    uptime_ns: int  # since the node booted

    def bytes(self, value: int) -> int:
        return max(0, min(value, self.gpu_memory_bytes))

    def time_ns(self, value: int) -> int:
        return max(0, min(value, self.uptime_ns * MAX_PROCS))

    def calls(self, value: int) -> int:
        return max(0, min(value, self.uptime_ns // MIN_CALL_NS * MAX_PROCS))

    def gpu(self, g: RegionGpu) -> RegionGpu:
        return replace(
            g,
            used_bytes=self.bytes(g.used_bytes),
            limit_bytes=self.bytes(g.limit_bytes),
            launches=self.calls(g.launches),
            gpu_ns=self.time_ns(g.gpu_ns),
            throttled_ns=self.time_ns(g.throttled_ns),
            oom_refusals=self.calls(g.oom_refusals),
            held_ns=self.time_ns(g.held_ns),
            burst_ns=self.time_ns(g.burst_ns),
        )


def node_uptime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)
