"""`make bench-prepare`: NodePrepareResources latency over the real socket, the durable writes each prepare
costs, and the daemon's memory.

Starts the daemon as a subprocess on a simulated 8x H100 node in a temporary root, with claims read from a
directory, then measures vgpu claims (limits file, CDI spec, checkpoint) one per call and 128 per call, a
prepare issued while a claim whose directory a tenant filled with 100k files is unprepared (the files are
removed outside the node lock), and the daemon's RSS with 256 claims prepared. In this process, on the same
node, it counts the fsyncs and checkpoint commits of one prepare and one unprepare per family (NodeState
says which writes are durable: docs/architecture.md, "Durability").

`--smoke` (`make bench-prepare SMOKE=1`, which `make test` runs): every part once on a tiny scale (3 single
calls, one 128-claim call, 1000 tenant files, 16 claims held); its figures mean nothing and no target is
judged: exit 0 when every part ran.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dra_driver.backends import open_backend
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig
from dra_driver.io.files import fsync_count, is_temp
from dra_driver.io.logs import configure
from dra_driver.libtessera.names import SHARED_DIR_NAME
from kubelet_plugin.claims.api import NullClaimStatusWriter
from kubelet_plugin.claims.node_state import NodeInputs, NodeState
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.results import ClaimRef
from tests.support.claim_files import DirectoryClaimSource
from tests.support.kubelet_client import DraClient, register, wait_for_socket
from tests.support.sample_claims import allocated_claim, claim_ref, vgpu_claim
from tests.support.tenant_container import fill

NODE = "bench-node"
GPUS = 8
REPO = Path(__file__).resolve().parents[2]
NODE_FILE = REPO / "e2e" / "nodes" / "h100x8.yaml"
TARGETS = {
    "single p50 ms": 3.0,
    "single p99 ms": 25.0,
    "batch 128 max s": 1.0,
    "prepare beside the cleanup ms": 50.0,
    "unprepare beside the cleanup ms": 50.0,
    "RSS MiB": 150.0,
}
TENANT_FILES = int(os.environ.get("TESSERA_BENCH_TENANT_FILES", "100000"))  # the attack: 1000000
HELD = 256  # the memory target's prepared claims


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def make_claims(source: DirectoryClaimSource, prefix: str, count: int) -> list[ClaimRef]:
    claims: list[dict[str, Any]] = [
        vgpu_claim(f"{prefix}-{i}", pool=NODE, gpu=i % GPUS, memory="1Gi", cores="10") for i in range(count)
    ]
    for c in claims:
        source.put(c)
    return [claim_ref(c) for c in claims]


def check(answers: Any, claims: Sequence[ClaimRef]) -> None:
    for c in claims:
        error = answers.claims[c.uid].error
        if error:
            raise RuntimeError(f"claim {c.name}: {error}")


def start_daemon(root: Path, node_file: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tests.support.daemon", "--node-name", NODE, "--root", str(root)]
    cmd += ["--simulate", str(node_file), "--sim-state", str(root / "sim-state.json")]
    cmd += ["--claims-dir-source", str(root / "claims"), "--no-publish", "--log-level", "warning"]
    log = (root / "plugin.log").open("wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def measure(client: DraClient, source: DirectoryClaimSource, singles: int, batches: int) -> dict[str, float]:
    out: dict[str, float] = {}
    single: list[float] = []
    unsingle: list[float] = []
    for claim in make_claims(source, "single", singles):
        t0 = time.perf_counter()
        answers = client.prepare([claim])
        single.append((time.perf_counter() - t0) * 1000)
        check(answers, [claim])
        t0 = time.perf_counter()
        check(client.unprepare([claim]), [claim])
        unsingle.append((time.perf_counter() - t0) * 1000)
    out["single p50 ms"] = statistics.median(single)
    out["single p99 ms"] = percentile(single, 0.99)
    out["unprepare p50 ms"] = statistics.median(unsingle)

    batch: list[float] = []
    unbatch: list[float] = []
    for b in range(batches):
        claims = make_claims(source, f"batch{b}", 128)
        t0 = time.perf_counter()
        check(client.prepare(claims), claims)
        batch.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        check(client.unprepare(claims), claims)
        unbatch.append(time.perf_counter() - t0)
    out["batch 128 p50 s"] = statistics.median(batch)
    out["batch 128 max s"] = max(batch)
    out["unprepare 128 p50 s"] = statistics.median(unbatch)
    return out


def beside_a_filled_claim(
    client: DraClient, source: DirectoryClaimSource, paths: PluginPaths, tenant_files: int
) -> dict[str, float]:
    """Unprepare a claim whose directory holds `tenant_files` files; time another claim's prepare and
    unprepare while the daemon's sweeper removes them, and how long the sweeping took."""
    filled, other = make_claims(source, "filled", 2)
    check(client.prepare([filled]), [filled])
    fill(paths.claim_dir(filled.uid) / SHARED_DIR_NAME, tenant_files)
    t0 = time.perf_counter()
    check(client.unprepare([filled]), [filled])
    unprepared = time.perf_counter()
    t1 = time.perf_counter()
    check(client.prepare([other]), [other])
    t2 = time.perf_counter()
    check(client.unprepare([other]), [other])
    t3 = time.perf_counter()
    beside = any(is_temp(n) for n in os.listdir(paths.claims_dir))
    while any(is_temp(n) for n in os.listdir(paths.claims_dir)):
        time.sleep(0.05)
    return {
        "tenant files": tenant_files,
        "timed while the sweeper ran (1: yes)": float(beside),
        "unprepare of the filled claim ms": (unprepared - t0) * 1000,
        "prepare beside the cleanup ms": (t2 - t1) * 1000,
        "unprepare beside the cleanup ms": (t3 - t2) * 1000,
        "swept in s": time.perf_counter() - unprepared,
    }


def durable_writes(node_file: Path, under: Path) -> dict[str, float]:
    """fsyncs and checkpoint commits (durable ones apart) of one prepare and one unprepare per family."""
    root = Path(tempfile.mkdtemp(prefix="tsd-", dir=under))
    try:
        backend = open_backend(simulate=node_file, state_file=root / "sim-state.json")
        state = NodeState(NodeInputs(backend=backend, paths=PluginPaths.under(root), boot_id="bench"))
        source = DirectoryClaimSource(root=root / "claims")
        preparer = Preparer(state=state, claims=source, status=NullClaimStatusWriter(), pool_name=NODE)
        claims = {
            "vgpu": vgpu_claim("v", pool=NODE, gpu=0, memory="1Gi", cores="10"),
            "gpu": allocated_claim("g", device="gpu-1", family=whole.NAME, pool=NODE),
            "mig, switching MIG mode on (the simulated GPU's own file counts)": allocated_claim(
                "m", device="gpu-2-mig-1g10gb-0", family=mig.NAME, pool=NODE
            ),
        }
        out: dict[str, float] = {}
        for what, claim in claims.items():
            source.put(claim)
            ref = claim_ref(claim)
            for verb, call in (("prepare", preparer.prepare), ("unprepare", preparer.unprepare)):
                fsyncs, commits = fsync_count(), state.commits
                error = call([ref])[ref.uid].error
                if error:
                    raise RuntimeError(f"{verb} {what}: {error}")
                out[f"{verb} {what}: fsyncs"] = fsync_count() - fsyncs
                out[f"{verb} {what}: checkpoint writes"] = state.commits.total - commits.total
                out[f"{verb} {what}: durable"] = state.commits.durable - commits.durable
        state.close()
        backend.close()
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(*, singles: int, batches: int, node_file: Path, under: Path, smoke: bool = False) -> int:
    root = Path(tempfile.mkdtemp(prefix="tsb-", dir=under))  # short: unix socket paths are limited
    paths = PluginPaths.under(root)
    source = DirectoryClaimSource(root=root / "claims")
    proc = start_daemon(root, node_file)
    try:
        wait_for_socket(paths.registration_socket, timeout=60)
        register(paths.registration_socket)
        with DraClient(paths.dra_socket) as client:
            client.prepare([])  # connect
            results = measure(client, source, singles, batches)
            results.update(beside_a_filled_claim(client, source, paths, 1000 if smoke else TENANT_FILES))
            # the memory target: 256 prepared claims on 8 GPUs
            held = make_claims(source, "held", 16 if smoke else HELD)
            for chunk in (held[:128], held[128:]):
                check(client.prepare(chunk), chunk)
            results["RSS MiB"] = rss_mib(proc.pid)
        write = sys.stdout.write  # CLI output
        if smoke:
            write("--smoke: every part once, tiny; the figures mean nothing, no target is judged\n")
        write(f"simulated node {node_file.name}: {singles} single-claim calls, {batches} x 128-claim calls\n")
        write(f"root {root} (each fsync there costs what this filesystem's flush costs)\n")
        for name, value in durable_writes(node_file, under).items():
            write(f"{name:>72}: {value:3.0f}\n")
        for name, value in results.items():
            target = None if smoke else TARGETS.get(name)
            verdict = "" if target is None else ("  ok" if value <= target else f"  OVER target {target}")
            write(f"{name:>22}: {value:9.3f}{verdict}\n")
        return 0 if smoke or all(results[k] <= v for k, v in TARGETS.items()) else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        if os.environ.get("TESSERA_BENCH_KEEP"):
            sys.stdout.write(f"kept {root}\n")
        else:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    configure(level="warning", fmt="console")
    parser = argparse.ArgumentParser(prog="bench-prepare", description=__doc__)
    parser.add_argument("--singles", type=int, default=400, help="single-claim calls to time")
    parser.add_argument("--batches", type=int, default=5, help="128-claim calls to time")
    parser.add_argument("--node-file", type=Path, default=NODE_FILE)
    parser.add_argument("--under", type=Path, default=Path("/tmp"), help="where the temporary root goes")
    parser.add_argument("--smoke", action="store_true", help="every part once, tiny (make test runs it)")
    args = parser.parse_args(argv)
    singles, batches = (3, 1) if args.smoke else (args.singles, args.batches)
    return run(singles=singles, batches=batches, node_file=args.node_file, under=args.under, smoke=args.smoke)


if __name__ == "__main__":
    sys.exit(main())
