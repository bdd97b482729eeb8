"""`make bench-metrics`: what a scrape of /metrics costs with 256 prepared vgpu claims whose regions are full.

Starts the daemon (simulated 2 x H100 whose UUIDs the fake driver reports) with `--metrics-address`, prepares
256 vgpu claims over its DRA socket, then runs one fake-driver program in each claim's directory under the
interception library (interceptor/build: `tcuda usage`, which holds memory, has one allocation refused and, in
the first 16 claims (10 % of the SMs each), launches kernels through the SM limiter, then stays alive), so
every region has a live process, its bytes and counters. (The other claims have no SM limit: 128 limited
claims on one GPU would each wait for a 1/128 part of the frame, and filling the regions would take minutes;
what a scrape reads from a region is the same either way.)
Measured: reading the 256 regions and rendering the text (the daemon's own collector, in this process, over
the daemon's files, with the check of each slot's remembered holder: its container), the same without any
/proc, a full /proc scan (what a scrape pays when some holder changed), and whole HTTP scrapes of the running
daemon. Target: read + render < 50 ms.

`--smoke` (`make bench-metrics SMOKE=1`, which `make test` runs): the same with 4 claims and 3 rounds; its
figures mean nothing and the target is not judged: exit 0 when every part ran.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from kubelet_plugin.claims import claim_processes
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.serving.node_observability import scrape
from tests.support.claim_files import DirectoryClaimSource
from tests.support.doubles.interceptor_programs import TCUDA, container_view, env, start
from tests.support.kubelet_client import DraClient, register, wait_for_socket
from tests.support.loopback import free_port
from tests.support.node_metrics import NODE_FILE, metrics_for
from tests.support.sample_claims import claim_ref, vgpu_claim

NODE = "bench-node"
TARGET_MS = 50.0
MiB = 1 << 20
LIMITED = 16  # claims with an SM limit whose programs launch kernels


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_daemon(root: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tests.support.daemon", "--node-name", NODE, "--root", str(root)]
    cmd += ["--simulate", str(NODE_FILE), "--sim-state", str(root / "sim-state.json")]
    cmd += ["--claims-dir-source", str(root / "claims"), "--no-publish", "--log-level", "warning"]
    cmd += ["--metrics-address", f"127.0.0.1:{port}"]
    log = (root / "plugin.log").open("wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def fill_regions(paths: PluginPaths, uids: Sequence[str], state: Path) -> list[subprocess.Popen[str]]:
    """One live process per claim, each after its allocations and launches are in the region."""
    running: list[subprocess.Popen[str]] = []
    batch = 16
    for i in range(0, len(uids), batch):
        started = [
            start(
                TCUDA,
                "usage",
                str(64 * MiB),
                "8" if i + k < LIMITED else "0",
                "200",
                # the fake GPU has 128 context channels: every 64 processes get a fake GPU of their own
                env=env(
                    container_view(paths.claims_dir / uid), state.with_name(f"{state.name}-{(i + k) // 64}")
                ),
            )
            for k, uid in enumerate(uids[i : i + batch])
        ]
        for p in started:
            assert p.stdout is not None
            line = p.stdout.readline()
            if "ready" not in line:
                raise RuntimeError(f"tcuda usage: {line}{p.stdout.read()}")
        running += started
    return running


def time_ms(fn: object, rounds: int) -> list[float]:
    assert callable(fn)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(claims: int, rounds: int) -> bool:
    """Prints the figures; whether the target was met."""
    root = Path(tempfile.mkdtemp(prefix="tbm-", dir="/tmp"))
    paths = PluginPaths.under(root)
    port = free_port()
    daemon = start_daemon(root, port)
    programs: list[subprocess.Popen[str]] = []
    try:
        wait_for_socket(paths.registration_socket, timeout=30)
        register(paths.registration_socket)
        source = DirectoryClaimSource(root=root / "claims")
        made = [
            vgpu_claim(f"c{i}", pool=NODE, gpu=0, memory="1Gi", cores="10" if i < LIMITED else "0")
            for i in range(claims)
        ]
        for c in made:
            source.put(c)
        with DraClient(paths.dra_socket) as client:
            answers = client.prepare([claim_ref(c) for c in made])
        bad = [a.error for a in answers.claims.values() if a.error]
        if bad:
            raise RuntimeError(f"prepare failed: {bad[0]}")
        t0 = time.monotonic()
        programs = fill_regions(paths, [c["metadata"]["uid"] for c in made], root / "gpu")
        filled_s = time.monotonic() - t0

        render = scrape(metrics_for(root, paths))
        cold = time_ms(render, 1)[0]
        warm = time_ms(render, rounds)
        text = render().decode()
        url = f"http://127.0.0.1:{port}/metrics"
        http = time_ms(lambda: urllib.request.urlopen(url, timeout=10).read(), rounds)
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        used = sum(1 for line in text.splitlines() if line.startswith("tessera_claim_memory_used_bytes{"))
        print(f"{claims} prepared vgpu claims, {len(programs)} live processes ({filled_s:.1f} s to fill)")
        print(f"  exposition: {len(text) / 1024:.0f} KiB, {series} samples, {used} claims with live usage")
        p50, p99 = percentile(warm, 0.5), percentile(warm, 0.99)
        print(
            f"  read {claims} regions + render: p50 {p50:.1f} ms  p99 {p99:.1f} ms  mean "
            f"{statistics.fmean(warm):.1f} ms  (first scrape, claim list built: {cold:.1f} ms)"
        )
        (root / "no-proc").mkdir()
        blind = time_ms(scrape(metrics_for(root, paths, proc=root / "no-proc")), rounds)
        print(
            f"  the same without the /proc scan (nothing to see): p50 {percentile(blind, 0.5):.1f} ms  "
            f"p99 {percentile(blind, 0.99):.1f} ms"
        )
        scans = time_ms(claim_processes.scan, rounds)  # what a scrape pays when a holder changed
        entries = sum(1 for n in claim_processes.PROC.iterdir() if n.name.isdigit())
        holders = sum(len(v) for v in claim_processes.scan().values())
        print(
            f"  a full /proc scan ({entries} processes, {holders} holding a region): p50 "
            f"{percentile(scans, 0.5):.1f} ms  p99 {percentile(scans, 0.99):.1f} ms"
        )
        h50, h99 = percentile(http, 0.5), percentile(http, 0.99)
        print(f"  HTTP scrape of the daemon: p50 {h50:.1f} ms  p99 {h99:.1f} ms")
        ok = percentile(warm, 0.5) < TARGET_MS
        print(f"  target read + render < {TARGET_MS:.0f} ms (p50): {'met' if ok else 'MISSED'}")
        return ok
    finally:
        for p in programs:
            p.kill()
        for p in programs:
            p.wait()
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-metrics", description=__doc__)
    parser.add_argument("--claims", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="4 claims, 3 rounds (make test runs it)")
    args = parser.parse_args(argv)
    if args.smoke:
        print("--smoke: every part once, on a tiny scale; the figures mean nothing, the target is not judged")
        run(4, 3)  # the target is not judged
        return 0
    return 0 if run(args.claims, args.rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
