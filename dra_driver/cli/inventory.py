"""`tessera inventory`: the ResourceSlices this node would publish.

    tessera inventory [--simulate NODE.yaml] [--state-file FILE] [--settings FILE] [--node-name NAME]
                      [-o summary|yaml|json]

`dra_driver.cli` imports this module only when `tessera inventory` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import yaml

from dra_driver.backends import open_backend
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core import families
from dra_driver.core.families.base import Json
from dra_driver.core.slices import build_slices
from dra_driver.io.settings_file import load_settings


def summary(slices: Sequence[Json]) -> str:
    """One line per slice (devices in the order the scheduler visits them: first and last), then per GPU
    what is offered, by family."""
    lines: list[str] = []
    per_gpu: dict[int, Counter[str]] = {}
    for s in slices:
        spec = s["spec"]
        meta = s["metadata"]
        assert isinstance(spec, dict) and isinstance(meta, dict)
        pool = spec["pool"]
        if "sharedCounters" in spec:
            sets = spec["sharedCounters"]
            lines.append(f"slice {meta['name']} (pool {pool['name']}): {len(sets)} counter sets")
            lines.extend(f"  {cs['name']}: {len(cs['counters'])} counters" for cs in sets)
            continue
        devices = spec["devices"]
        span = f" ({devices[0]['name']} ... {devices[-1]['name']})" if devices else ""
        lines.append(f"slice {meta['name']} (pool {pool['name']}): {len(devices)} devices{span}")
        for d in devices:
            parsed = families.parse_device_name(str(d["name"]))
            per_gpu.setdefault(parsed.index, Counter())[parsed.family.name] += 1
    if per_gpu:
        lines.append("per GPU:")
    for index, counts in sorted(per_gpu.items()):
        shown = ", ".join(f"{name} {counts[name]}" for name in families.names())
        lines.append(f"  gpu-{index}: {shown}")
    total = sum(len(s["spec"].get("devices", [])) for s in slices)
    lines.append(f"{len(slices)} slices, {total} devices")
    return "\n".join(lines)


def render(slices: Sequence[Json], output: str) -> str:
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(slices)}, indent=2)
    if output == "yaml":
        return yaml.safe_dump_all(list(slices), sort_keys=False)
    return summary(slices)


def _inventory(args: argparse.Namespace) -> int:
    backend = open_backend(simulate=args.simulate, state_file=args.state_file)
    try:
        node_name = args.node_name or os.environ.get("NODE_NAME") or ""
        if not node_name and isinstance(backend, SimulatedBackend):
            node_name = backend.node.node_name
        settings = load_settings(args.settings, node_name or socket.gethostname())
        inventory = backend.inventory()
        settings.check_fits(inventory)  # refused as the node daemon refuses it
        slices = build_slices(inventory, settings, degraded=args.degraded)
    finally:
        backend.close()
    sys.stdout.write(render(slices, args.output) + "\n")
    return 0


def add_cli(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("inventory", help="print the ResourceSlices this node would publish")
    p.add_argument("--simulate", type=Path, help="simulated node file (sim.tessera.dev/v1 SimulatedNode)")
    p.add_argument("--state-file", type=Path, help="the simulated backend's state file")
    p.add_argument("--settings", type=Path, help="node settings file (resource.tessera.dev/v1 NodeSettings)")
    p.add_argument(
        "--node-name", help="node (and pool) name; default $NODE_NAME, the node file's, the hostname"
    )
    p.add_argument("--degraded", action="store_true", help="whole GPUs only, without counters")
    p.add_argument("-o", "--output", choices=("summary", "yaml", "json"), default="summary")
    p.set_defaults(handler=_inventory)
