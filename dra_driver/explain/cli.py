"""`tessera explain CLAIM`: can a claim be allocated on a node, and why not. Exit 0 yes, 1 no, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dra_driver.errors import TesseraError
from dra_driver.explain.catalog import allocations_of, build_catalog, claim_ref
from dra_driver.explain.explain import explain_claim
from dra_driver.explain.request import parse_claim, parse_device_class
from dra_driver.explain.sources import REPO_DEVICECLASSES, ClusterSource, Inputs, load_files, simulated_slices
from dra_driver.explain.verdict import ClaimVerdict, render

EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_USAGE = 0, 1, 2


def add_cli(subparsers: Any) -> None:
    """Register `explain` on the `tessera` command's subparsers; the handler is in `handler`."""
    p = subparsers.add_parser(
        "explain",
        help="explain why a ResourceClaim can or cannot be allocated on a node",
        description="Evaluate a claim against one node's ResourceSlices like kube-scheduler does. "
        "Exit code 0: it fits; 1: it does not; 2: bad input.",
    )
    p.add_argument(
        "claim", help="a ResourceClaim/ResourceClaimTemplate YAML file, or namespace/name in the cluster"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--simulate",
        type=Path,
        action="append",
        metavar="NODEFILE",
        help="YAML with ResourceSlices (and allocated claims, DeviceClasses) or a SimulatedNode; repeatable",
    )
    where.add_argument("--node", help="node name in the cluster whose slices to read")
    p.add_argument(
        "--kubeconfig", help="kubeconfig for cluster mode (default: in-cluster, then ~/.kube/config)"
    )
    p.add_argument(
        "--classes",
        type=Path,
        action="append",
        metavar="PATH",
        help="DeviceClass YAML file or directory (with --simulate; default: the repo's deviceclasses/)",
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.add_argument("--verbose", action="store_true", help="also list devices other DeviceClasses select")
    p.set_defaults(handler=run)


def _node_of(inputs: Inputs) -> str:
    nodes = sorted({str(s["spec"].get("nodeName")) for s in inputs.slices if s["spec"].get("nodeName")})
    if len(nodes) != 1:
        raise TesseraError(
            f"the simulated slices name {len(nodes)} nodes ({', '.join(nodes)}); give --node"
            if nodes
            else "no ResourceSlice with spec.nodeName in the simulated input"
        )
    return nodes[0]


def _verdict(args: argparse.Namespace) -> ClaimVerdict:
    claim_path = Path(args.claim)
    from_file = claim_path.suffix in (".yaml", ".yml", ".json") or claim_path.exists()
    cluster = None if args.simulate else ClusterSource(kubeconfig=args.kubeconfig)
    if from_file:
        given = load_files([claim_path])
        raw_claims = given.claims + given.templates
        if len(raw_claims) != 1:
            raise TesseraError(
                f"{claim_path}: expected exactly one ResourceClaim or ResourceClaimTemplate, "
                f"found {len(raw_claims)}"
            )
        raw_claim = raw_claims[0]
    else:
        namespace, slash, name = args.claim.partition("/")
        if not slash or cluster is None:
            raise TesseraError(f"{args.claim!r} is neither a file nor namespace/name read from the cluster")
        given, raw_claim = Inputs(), cluster.claim(namespace, name)
    if cluster is not None:
        if not args.node:
            raise TesseraError("cluster mode needs --node NAME")
        node = args.node
        world = cluster.inputs(node=node)
    else:
        world = load_files(args.simulate) + given
        world = world + Inputs(slices=tuple(s for n in world.nodes for s in simulated_slices(n)))
        if not world.classes:
            world = world + load_files(args.classes or [REPO_DEVICECLASSES])
        node = _node_of(world)
    classes = {c.name: c for c in map(parse_device_class, world.classes)}
    return explain_claim(
        claim=parse_claim(raw_claim),
        classes=classes,
        catalog=build_catalog(world.slices, node=node),
        allocations=allocations_of(world.claims, skip=claim_ref(raw_claim)),
        node=node,
    )


def run(args: argparse.Namespace) -> int:
    try:
        verdict = _verdict(args)
    except TesseraError as e:
        sys.stderr.write(f"tessera explain: {e}\n")
        return EXIT_USAGE
    if args.output == "json":
        sys.stdout.write(json.dumps(verdict.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render(verdict, verbose=args.verbose) + "\n")
    return EXIT_FITS if verdict.satisfiable else EXIT_DOES_NOT_FIT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
