"""Workloads that interceptor/gpu-check runs on a real GPU, each printing key=value lines.

Run as `python3 gpu_check.py <workload> [args]` inside a claim (gpu-check sets the claim's environment and
preloads libtessera). Needs torch (CuPy, JAX and Triton rows are skipped without them).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

CHUNK = 256 << 20


def _say(**kv: object) -> None:
    print(" ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def mem(limit: int) -> None:
    """Allocate 256 MiB tensors until the allocator refuses (PYTORCH_CUDA_ALLOC_CONF picks the backend)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    held = []
    try:
        while sum(t.numel() for t in held) < 2 * limit:
            held.append(torch.empty(CHUNK, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        pass
    torch.cuda.synchronize()
    _say(total=total, free=free, allocated=sum(t.numel() for t in held))


def hold(nbytes: int, seconds: float) -> None:
    """Hold nbytes (or say it was refused) for a while: two of these share one claim's limit."""
    import torch

    try:
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        _say(held=x.numel())
    except torch.cuda.OutOfMemoryError:
        _say(held=0, refused=1)
    time.sleep(seconds)


def chunk_sizes(nbytes: int, chunk: int = CHUNK) -> list[int]:
    """nbytes as the touch workload's tensors: chunks of `chunk` bytes, then the rest in whole float32s."""
    rest = nbytes % chunk // 4 * 4
    return [chunk] * (nbytes // chunk) + ([rest] if rest else [])


def touch(nbytes: int, passes: int) -> None:
    """Memory oversubscription's workload: nbytes of float32 tensors (chunk i filled with i), every element
    incremented `passes` times, then every chunk checked to hold i + passes. Prints what was allocated (or
    refused=1), how long the passes took, the GB/s they read and wrote, and correct=1|0."""
    import torch

    held = []
    try:
        for i, size in enumerate(chunk_sizes(nbytes)):
            held.append(torch.full((size // 4,), float(i), dtype=torch.float32, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        _say(allocated=sum(t.numel() * 4 for t in held), refused=1, correct=0)
        return
    torch.cuda.synchronize()
    t0 = time.monotonic()
    for _ in range(passes):
        for t in held:
            t.add_(1.0)
    torch.cuda.synchronize()
    seconds = time.monotonic() - t0
    correct = all(bool((t == float(i + passes)).all()) for i, t in enumerate(held))
    _say(
        allocated=sum(t.numel() * 4 for t in held),
        seconds=f"{seconds:.3f}",
        gbps=f"{2 * nbytes * passes / max(seconds, 1e-9) / 1e9:.2f}",
        correct=int(correct),
    )


def cupy_pool(limit: int) -> None:
    import cupy

    held = []
    try:
        while len(held) * CHUNK < 2 * limit:
            held.append(cupy.empty(CHUNK, dtype=cupy.uint8))
    except cupy.cuda.memory.OutOfMemoryError:
        pass
    _say(allocated=len(held) * CHUNK, pool=cupy.get_default_memory_pool().total_bytes())


def jax_limit() -> None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    _say(bytes_limit=stats.get("bytes_limit", 0))


def _rate(step: Callable[[], object], sync: Callable[[], None], seconds: float) -> float:
    for _ in range(20):
        step()
    sync()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            step()
        sync()
        n += 10
    return n / (time.perf_counter() - t0)


def matmul(seconds: float) -> None:
    """The H100 figures' workload: 4096x4096 fp32 matmuls back to back."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    _say(rate=f"{_rate(lambda: torch.mm(a, a), torch.cuda.synchronize, seconds):.2f}")


def graph(seconds: float) -> None:
    """Capture 4 matmuls in a CUDA graph (torch.cuda.graph, global capture mode) and replay it."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            b = torch.mm(a, a)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(4):
            b = torch.mm(a, a)
    del b
    _say(captured=1, rate=f"{4 * _rate(g.replay, torch.cuda.synchronize, seconds):.2f}")


def compiled(seconds: float) -> None:
    """torch.compile(mode="reduce-overhead"): CUDA graph trees capture the model."""
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).cuda()
    fn = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(512, 2048, device="cuda")
    with torch.no_grad():
        for _ in range(5):
            fn(x)
        rate = _rate(lambda: fn(x), torch.cuda.synchronize, seconds)
    _say(captured=1, rate=f"{rate:.2f}")


def triton_add(seconds: float) -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, block: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * block + tl.arange(0, block)
        mask = offs < n
        tl.store(
            out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask
        )

    n = 1 << 10
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    step = lambda: add[(1,)](x, y, out, n, block=n)  # noqa: E731
    rate = _rate(step, torch.cuda.synchronize, seconds)
    ok = bool(torch.allclose(out, x + y))
    _say(correct=int(ok), us_per_launch=f"{1e6 / rate:.2f}")


def train(seconds: float) -> None:
    """A small transformer training step (the overhead row)."""
    import torch

    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, batch_first=True).cuda()
    opt = torch.optim.AdamW(layer.parameters())
    x = torch.randn(32, 128, 512, device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        layer(x).sum().backward()
        opt.step()

    _say(steps_per_s=f"{_rate(step, torch.cuda.synchronize, seconds):.2f}")


def tiny(n: int) -> None:
    import torch

    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    _say(us_per_launch=f"{(time.perf_counter() - t0) / n * 1e6:.3f}")


def gaps(seconds: float) -> None:
    """Matmuls one at a time for a while; prints each stretch of over 20 ms without one finishing (how long
    a claim held back for priority stood still), in CLOCK_MONOTONIC seconds like the library's clock."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    t0 = last = time.monotonic()
    n = 0
    while time.monotonic() - t0 < seconds:
        torch.mm(a, a)
        torch.cuda.synchronize()
        now = time.monotonic()
        if now - last > 0.02:
            _say(gap_start=f"{last:.4f}", gap_end=f"{now:.4f}")
        last, n = now, n + 1
    _say(rate=f"{n / (time.monotonic() - t0):.2f}")


def timed_matmul(seconds: float) -> None:
    """matmul, also saying when it stopped (CLOCK_MONOTONIC)."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    rate = _rate(lambda: torch.mm(a, a), torch.cuda.synchronize, seconds)
    _say(rate=f"{rate:.2f}", end=f"{time.monotonic():.4f}")


def wake_ms(done: Sequence[float], t0: float, frame_s: float = 0.050) -> tuple[float, float]:
    """From the completion times of back-to-back kernels started at t0: the rate they settled at (over the
    second half of the run) and the time from t0 to the start of the first frame-long window that held as many
    completed kernels as a settled frame holds (-1: never).

    Counted against the settled frame, not against the share itself: kernels finish whole, and the limiter
    starts none that would overrun the claim's part of a frame, so a 70 % claim running 2.8 ms matmuls in a
    35 ms part settles at 12 a frame (64 %) on an H100, and a bar of "65 % of the solo rate" asks for a 13th
    that no frame holds. Whether the settled share is near the claim's share is the busy row's question."""
    if not done:
        return 0.0, -1.0
    half = t0 + (done[-1] - t0) / 2
    settled = [d for d in done if d > half]
    rate = len(settled) / (done[-1] - half) if len(settled) > 1 else 0.0
    need = max(1, int(rate * frame_s))
    starts = [t0, *done]
    j = 0
    for i, start in enumerate(starts):
        j = max(j, i)
        while j < len(done) and done[j] <= start + frame_s:
            j += 1
        if j == len(done):
            break
        if j - i >= need:
            return rate, (start - t0) * 1000
    return rate, -1.0


def wake(idle: float, seconds: float, solo_rate: float) -> None:
    """Idle for a while (tensors made, one matmul run), then matmuls back to back: prints the rate, the
    settled share (% of solo_rate) and wake_ms (see wake_ms)."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    torch.mm(a, a)
    torch.cuda.synchronize()
    time.sleep(idle)
    t0 = time.monotonic()
    done: list[float] = []
    while time.monotonic() - t0 < seconds:
        torch.mm(a, a)
        torch.cuda.synchronize()
        done.append(time.monotonic())
    rate, found = wake_ms(done, t0)
    _say(
        rate=f"{len(done) / (time.monotonic() - t0):.2f}",
        settled_pct=f"{100 * rate / solo_rate:.1f}",
        wake_ms=f"{found:.1f}",
    )


def first(tries: int) -> None:
    """A tiny kernel every 200 ms (idle in between): the median time from its launch to its end."""
    import torch

    x = torch.zeros(1, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    waits: list[float] = []
    for _ in range(tries):
        time.sleep(0.2)
        t0 = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        waits.append(time.perf_counter() - t0)
    _say(first_ms=f"{sorted(waits)[len(waits) // 2] * 1000:.3f}")


def workloads(args: Sequence[str]) -> dict[str, Callable[[], None]]:
    """Every workload gpu-check may name, each with its arguments bound (read when it runs)."""
    return {
        "mem": lambda: mem(int(args[0])),
        "hold": lambda: hold(int(args[0]), float(args[1])),
        "cupy": lambda: cupy_pool(int(args[0])),
        "jax": jax_limit,
        "matmul": lambda: matmul(float(args[0])),
        "graph": lambda: graph(float(args[0])),
        "compile": lambda: compiled(float(args[0])),
        "triton": lambda: triton_add(float(args[0])),
        "train": lambda: train(float(args[0])),
        "tiny": lambda: tiny(int(args[0])),
        "gaps": lambda: gaps(float(args[0])),
        "timed_matmul": lambda: timed_matmul(float(args[0])),
        "wake": lambda: wake(float(args[0]), float(args[1]), float(args[2])),
        "first": lambda: first(int(args[0])),
        "touch": lambda: touch(int(args[0]), int(args[1])),
    }


def main() -> None:
    workloads(sys.argv[2:])[sys.argv[1]]()


if __name__ == "__main__":
    main()
