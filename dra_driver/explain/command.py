"""What `tessera explain` does once its arguments are parsed: gather inputs, explain, print."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra_driver.explain.catalog import allocations_of, build_catalog, claim_ref
from dra_driver.explain.explain import explain_claim
from dra_driver.explain.request import parse_claim, parse_device_class
from dra_driver.explain.sources import REPO_DEVICECLASSES, ClusterSource, Inputs, load_files, simulated_slices
from dra_driver.explain.verdict import ClaimVerdict, render
from dra_driver.vocabulary.errors import TesseraError

EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_USAGE = 0, 1, 2
EXIT_CANNOT_DECIDE = 2  # shared with bad input: either way there is no yes/no answer; stderr says which
# What the layer above (`tessera`, kubelet_plugin.command) may set as the `workload_claims` default: the
# claim templates a file of Pods or workloads would get ((label, template) pairs; none: not such a file).
# The admission webhook's conversion does it; this package never imports it.
WorkloadClaims = Callable[[Path], Sequence[tuple[str, dict[str, Any]]]]


def _node_of(inputs: Inputs) -> str:
    nodes = sorted({str(s["spec"].get("nodeName")) for s in inputs.slices if s["spec"].get("nodeName")})
    if len(nodes) != 1:
        raise TesseraError(
            f"the simulated slices name {len(nodes)} nodes ({', '.join(nodes)}); give --node"
            if nodes
            else "no ResourceSlice with spec.nodeName in the simulated input"
        )
    return nodes[0]


def _simulated(args: argparse.Namespace, given: Inputs, settings: Path | None) -> Inputs:
    """The --simulate files (and the claim's own file), each SimulatedNode turned into the slices it would
    publish with `settings`, and the repository's DeviceClasses when none is given."""
    world = load_files(args.simulate) + given
    if settings is not None and not world.nodes:
        raise TesseraError(
            "--settings is for a SimulatedNode, and none was given: ResourceSlices are read as published"
        )
    world = world + Inputs(
        slices=tuple(s for n in world.nodes for s in simulated_slices(n, settings=settings))
    )
    if not world.classes:
        world = world + load_files(args.classes or [REPO_DEVICECLASSES])
    return world


def _targets(args: argparse.Namespace) -> Sequence[tuple[str, Mapping[str, Any] | None]]:
    """The claims to explain: those a Pod or workload file would get, else the one the argument names."""
    convert: WorkloadClaims | None = getattr(args, "workload_claims", None)
    path = Path(args.claim)
    found = convert(path) if convert is not None and path.is_file() else ()
    return found or (("", None),)


def _verdict(args: argparse.Namespace, claim: Mapping[str, Any] | None = None) -> ClaimVerdict:
    claim_path = Path(args.claim)
    from_file = claim_path.suffix in (".yaml", ".yml", ".json") or claim_path.exists()
    cluster = None if args.simulate else ClusterSource(kubeconfig=args.kubeconfig)
    settings: Path | None = args.settings
    if claim is not None:
        given, raw_claim = Inputs(), claim
    elif from_file:
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
        if settings is not None:
            raise TesseraError("--settings is for --simulate: a cluster's slices are read as published")
        node = args.node
        world = cluster.inputs(node=node)
    else:
        world = _simulated(args, given, settings)
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
        verdicts = [(label, _verdict(args, claim)) for label, claim in _targets(args)]
    except TesseraError as e:
        sys.stderr.write(f"tessera explain: {e}\n")
        return EXIT_USAGE
    if len(verdicts) == 1 and not verdicts[0][0]:
        return _report(args, verdicts[0][1])
    codes = []
    for label, verdict in verdicts:
        sys.stdout.write(f"== {label}\n")
        codes.append(_report(args, verdict))
    return max(codes)


def _report(args: argparse.Namespace, verdict: ClaimVerdict) -> int:
    if args.output == "json":
        sys.stdout.write(json.dumps(verdict.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render(verdict, verbose=args.verbose) + "\n")
    if not verdict.decided:
        sys.stderr.write(f"tessera explain: cannot decide: {verdict.undecided[0]}\n")
        return EXIT_CANNOT_DECIDE
    return EXIT_FITS if verdict.satisfiable else EXIT_DOES_NOT_FIT
