"""`python -m scheduler_extender`: the fragmentation-aware scheduler extender (docs/scheduling.md).

kube-scheduler calls POST /prioritize and POST /fill (two extender stanzas, configured as in
deploy/scheduler/kube-scheduler-extender-config.yaml, `ignorable: true`); the answers come from the
ResourceSlices, ResourceClaims, Nodes and Pods it watches and the mix of typical requests it is given
(`--mix`, read once at start), so it runs with as many replicas as wanted behind one Service, each needing
only list and watch on those four kinds.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import structlog

from admission.watch import ApiSource, Watched
from dra_driver.io import logs
from dra_driver.io.api_client import api_client
from dra_driver.io.api_objects import CLAIMS, NODES, PODS, SLICES
from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.cluster_view import Obj
from scheduler_extender.fragmentation import Mix
from scheduler_extender.mix import parse_mix
from scheduler_extender.node_room import keep_node, keep_pod
from scheduler_extender.node_views import NodeViews, watch_into
from scheduler_extender.prioritize import Scoring, Verb
from scheduler_extender.server import ExtenderServer

log = structlog.get_logger()
SHIPPED_MIX = "mixes/openb.csv"  # the openb trace's requests (scheduler_extender/mix.py)
UNIT = 40.0  # thousandths of a GPU of growth per point (docs/performance.md: ten seeds of the full cluster)


def keep_claim(claim: Obj) -> Obj:
    """What the score reads of a ResourceClaim: its name, its requests, its allocation."""
    metadata, status = claim.get("metadata") or {}, claim.get("status") or {}
    return {
        "metadata": {k: metadata.get(k) for k in ("namespace", "name")},
        "spec": claim.get("spec"),
        "status": {"allocation": status.get("allocation")} if isinstance(status, dict) else {},
    }


def read_mix(path: Path | None) -> Mix:
    """The mix in `path` (a CSV: scheduler_extender/mix.py), or the shipped one; ConfigError if unreadable."""
    if path is None:
        text = resources.files("scheduler_extender").joinpath(SHIPPED_MIX).read_text(encoding="utf-8")
        return parse_mix(text, what=f"scheduler_extender/{SHIPPED_MIX}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--mix {path}: cannot read it ({e}); give a CSV of typical requests") from e
    return parse_mix(text, what=str(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_extender", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, help="default: the in-cluster service account")
    parser.add_argument("--address", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument(
        "--mix",
        type=Path,
        help="the typical requests, a CSV of cpu_milli,memory_mib,num_gpu,gpu_milli,count (e.g. a mounted "
        "ConfigMap; default: the openb trace's mix, shipped with the extender)",
    )
    parser.add_argument(
        "--unit",
        type=float,
        default=UNIT,
        help="thousandths of a GPU of fragmentation growth per point of the 0-10 score (0: min-max)",
    )
    parser.add_argument(
        "--score-cpu-pods",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score pods that ask for no GPU too, by the GPUs their CPU and memory would strand (the shipped "
        "scheduler configuration turns kube-scheduler's own spreading off and needs it)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", choices=("json", "console"), default="console")
    args = parser.parse_args(argv)
    logs.configure(level=args.log_level, fmt=args.log_format)
    try:
        scoring = Scoring(mix=read_mix(args.mix), unit=args.unit or None, cpu_pods=args.score_cpu_pods)
        api = api_client(args.kubeconfig)
    except ConfigError as e:
        parser.error(str(e))
    if args.unit < 0:
        parser.error(f"--unit {args.unit}: give 0 (min-max) or a positive number of thousandths of a GPU")
    rest = RestCalls(api)
    slices = Watched(name="resourceslices", source=ApiSource(rest, SLICES), keep=lambda s: s)
    claims = Watched(name="resourceclaims", source=ApiSource(rest, CLAIMS), keep=keep_claim)
    nodes = Watched(name="nodes", source=ApiSource(rest, NODES), keep=keep_node)
    pods = Watched(name="pods", source=ApiSource(rest, PODS), keep=keep_pod)
    watches = (slices, claims, nodes, pods)
    views = NodeViews()  # each node's view, kept as the watches' events arrive (node_views.py)
    watch_into(views, slices=slices, claims=claims, nodes=nodes, pods=pods)

    def answer(verb: Verb, body: Any) -> list[dict[str, Any]]:
        return views.prioritize(body, lookup=claims.get, scoring=scoring, verb=verb)

    server = ExtenderServer(args.address, args.port, answer, ready=lambda: all(w.synced for w in watches))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for watch in watches:
        watch.start()
    server.start()
    log.info("scoring", kinds=len(scoring.mix), unit=scoring.unit, cpu_pods=scoring.cpu_pods)
    stop.wait()
    log.info("stopping")
    server.stop()
    for watch in reversed(watches):
        watch.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
