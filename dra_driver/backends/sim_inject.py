"""`tessera sim inject`: a fault on a simulated GPU, injected from outside while its node plugin runs.

    tessera sim inject --node-file NODE.yaml --state-file STATE.json --gpu 2 --xid 79
    tessera sim inject ... --gpu 2 --ecc-dbe | --lost | --nvml-error
    tessera sim inject ... --gpu 2 --clear          # the GPU recovers (as after a reset)

It changes the simulated backend's state file under the backend's own lock; the daemon's health loop reads
it at its next check (`--health-interval`), with no restart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.gpu_health import APPLICATION_XIDS, describe, fault_from_xid
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import FaultKind, GpuFault


def _fault(args: argparse.Namespace) -> GpuFault | None:
    """The fault the options name; None for --clear."""
    if args.clear:
        return None
    if args.xid is not None:
        fault = fault_from_xid(args.xid, detail=args.detail)
        if fault is None:
            raise ConfigError(
                f"--xid {args.xid}: an application's XID ({sorted(APPLICATION_XIDS)}), not a device fault; "
                "the GPU would stay healthy. Use a critical XID such as 48 or 79"
            )
        return fault
    kind = FaultKind.ECC_DBE if args.ecc_dbe else FaultKind.LOST if args.lost else FaultKind.NVML_ERROR
    return GpuFault(kind=kind, detail=args.detail)


def _inject(args: argparse.Namespace) -> int:
    if args.xid is not None and args.xid < 0:
        raise ConfigError(f"--xid {args.xid}: an XID is a non-negative number")
    backend = SimulatedBackend.from_file(node_file=args.node_file, state_file=args.state_file)
    gpu = backend.gpu_by_index(args.gpu)
    fault = _fault(args)
    if fault is None:
        cleared = backend.clear_faults(gpu=gpu.uuid)
        sys.stdout.write(f"GPU {args.gpu} ({gpu.uuid}): {cleared} fault(s) cleared\n")
    else:
        backend.inject_fault(gpu=gpu.uuid, fault=fault)
        sys.stdout.write(f"GPU {args.gpu} ({gpu.uuid}): {describe(fault)} injected\n")
    return 0


def add_cli(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = sub.add_parser("sim", help="act on a simulated node")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    p = sim_sub.add_parser("inject", help="inject a fault on a simulated GPU, or clear its faults")
    p.add_argument("--node-file", type=Path, required=True, help="the simulated node file (SimulatedNode)")
    p.add_argument(
        "--state-file", type=Path, required=True, help="the node plugin's --sim-state file (changed in place)"
    )
    p.add_argument("--gpu", type=int, required=True, help="the GPU's index (its NVML minor)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--xid", type=int, help="a critical XID event (79: fallen off the bus, 48: DBE, ...)")
    what.add_argument("--ecc-dbe", action="store_true", help="a double-bit ECC error")
    what.add_argument("--lost", action="store_true", help="the GPU is lost (NVML answers GPU_IS_LOST)")
    what.add_argument("--nvml-error", action="store_true", help="NVML fails on the device")
    what.add_argument("--clear", action="store_true", help="the GPU recovers: clear every fault")
    p.add_argument("--detail", default="", help="free text shown in the health message and the Event")
    p.set_defaults(handler=_inject)
