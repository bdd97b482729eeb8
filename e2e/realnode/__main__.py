"""`python -m e2e.realnode upgrade` (`make bench-upgrade`): the seamless plugin upgrade on a real node
(e2e.realnode.upgrade), on its own control plane, with its figures printed.

Needs root and the built components: `bash e2e/cluster/build.sh`, `bash e2e/realnode/build.sh` and the
image (`make image`). `--smoke` (`make bench-upgrade SMOKE=1`): one worker, one pod before and one after the
switch; its figures mean nothing, but a failed pod or a leftover still fails it. `make test` runs the body,
`report_upgrade`, on the real-node scenarios' node (test_real_upgrade.py) rather than on a plane and a node of
its own.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from kubernetes import client as k8s

from dra_driver.io.logs import configure
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.launcher import start_control_plane
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.harness.node import NODES_DIR
from e2e.harness.testbed import make_testbed
from e2e.realnode.binaries import check_built
from e2e.realnode.errors import RealNodeError
from e2e.realnode.node import RealNode, short_root
from e2e.realnode.upgrade import UpgradeFigures, run_upgrade

NODE_FILE = NODES_DIR / "realnode-h100x2.yaml"


def report_upgrade(
    node: RealNode, namespace: str, *, workers: int, warmup_pods: int, after_pods: int
) -> UpgradeFigures:
    """The bench's body on a started node and an empty namespace: the upgrade under a stream of pods, its
    figures printed (make test runs it on the real-node scenarios' node: test_real_upgrade.py)."""
    print(f"installed with helm in {node.install_s:.1f} s", flush=True)
    print(
        f"{workers} workers create/delete vgpu pods; `helm upgrade` twice (a new image tag, then a settings "
        f"change) after {warmup_pods} pods ...",
        flush=True,
    )
    figures = run_upgrade(node, namespace, workers=workers, warmup_pods=warmup_pods, after_pods=after_pods)
    width = max(len(k) for k in figures.as_dict())
    for key, value in figures.as_dict().items():
        print(f"  {key:<{width}}  {value}")
    return figures


def upgrade(args: argparse.Namespace) -> int:
    plane_binaries = ensure_built(allow_build=False)
    node_binaries = check_built()
    with tempfile.TemporaryDirectory(prefix="tessera-upgrade-") as tmp:
        plane = start_control_plane(state_dir=Path(tmp) / "controlplane", binaries=plane_binaries)
        root = short_root()
        try:
            api = plane.api_client()
            bed = make_testbed(plane, api)
            node = RealNode(plane=plane, api=api, binaries=node_binaries, node_file=NODE_FILE, root=root)
            print(f"starting the real node {node.name} in {root} ...", flush=True)
            try:
                node.start()
                namespace = "upgrade"
                k8s.CoreV1Api(bed.api).create_namespace(
                    k8s.V1Namespace.model_validate({"metadata": {"name": namespace}})
                )
                wait_for_service_account(bed.api, namespace)
                figures = report_upgrade(
                    node,
                    namespace,
                    workers=args.workers,
                    warmup_pods=args.warmup_pods,
                    after_pods=args.after_pods,
                )
            finally:
                node.stop()
        finally:
            plane.stop()
        ok = not figures.failures and not figures.leftovers
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"the node's logs are kept in {root}/logs", file=sys.stderr)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.realnode", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "upgrade", help="run the seamless upgrade under a stream of pods and print its figures"
    )
    up.add_argument("--workers", type=int, default=3, help="pods created and deleted at once")
    up.add_argument("--warmup-pods", type=int, default=6, help="pods finished before the switch")
    up.add_argument("--after-pods", type=int, default=6, help="pods finished after the switch")
    up.add_argument("--smoke", action="store_true", help="1 worker, 1 + 1 pods (make test runs it)")
    up.set_defaults(handler=upgrade)
    args = parser.parse_args(argv)
    if args.smoke:
        args.workers, args.warmup_pods, args.after_pods = 1, 1, 1
    configure(level="warning")
    try:
        code: int = args.handler(args)
    except RealNodeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
