"""`python -m scheduler_extender`: the fragmentation-aware scheduler extender (docs/scheduling.md).

kube-scheduler calls POST /prioritize (configured as in deploy/scheduler/kube-scheduler-extender-config.yaml,
`ignorable: true`); the answers come from the ResourceSlices and ResourceClaims it watches, so it runs with
as many replicas as wanted behind one Service, each needing only list and watch on those two kinds.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import structlog

from admission.watch import Watched
from dra_driver.io import logs
from dra_driver.io.api_client import api_client
from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.cluster_view import Obj
from scheduler_extender.prioritize import prioritize
from scheduler_extender.server import ExtenderServer

log = structlog.get_logger()


def keep_claim(claim: Obj) -> Obj:
    """What the score reads of a ResourceClaim: its name, its requests, its allocation."""
    metadata, status = claim.get("metadata") or {}, claim.get("status") or {}
    return {
        "metadata": {k: metadata.get(k) for k in ("namespace", "name")},
        "spec": claim.get("spec"),
        "status": {"allocation": status.get("allocation")} if isinstance(status, dict) else {},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_extender", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, help="default: the in-cluster service account")
    parser.add_argument("--address", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logs.configure(level=args.log_level)
    try:
        api = api_client(args.kubeconfig)
    except ConfigError as e:
        parser.error(str(e))
    from kubernetes import client as k8s  # noqa: PLC0415

    resource = k8s.ResourceV1Api(api)

    def list_slices(**query: Any) -> Any:
        return resource.list_resource_slice(_preload_content=False, **query)

    def list_claims(**query: Any) -> Any:
        return resource.list_resource_claim_for_all_namespaces(_preload_content=False, **query)

    slices = Watched(name="resourceslices", call=list_slices, keep=lambda s: s)
    claims = Watched(name="resourceclaims", call=list_claims, keep=keep_claim)

    def answer(body: Any) -> list[dict[str, Any]]:
        return prioritize(body, slices=slices.items(), claims=claims.items(), lookup=claims.get)

    server = ExtenderServer(args.address, args.port, answer, ready=lambda: slices.synced and claims.synced)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for part in (slices, claims, server):
        part.start()
    stop.wait()
    log.info("stopping")
    for part in (server, claims, slices):
        part.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
