"""The demo workloads in deploy/examples/ as documents, and the pods → node → device → limits view of them
that the demo prints."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from dra_driver.vocabulary.names import DRIVER_NAME, Cap
from e2e.harness.kube import Json, allocated_results, get_claim, pod_claim_name
from e2e.kubelet_standin.errors import StandInError

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "deploy" / "examples"
DEVICECLASSES_DIR = REPO_ROOT / "deviceclasses"
FALLBACK_DEVICECLASSES = Path(__file__).resolve().parents[1] / "scenarios" / "fixtures" / "deviceclasses.yaml"


def example_files() -> list[Path]:
    return sorted(EXAMPLES_DIR.glob("*.yaml"))


def load(path: Path) -> list[Json]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def example(name: str) -> list[Json]:
    """The documents of deploy/examples/<name>.yaml."""
    return load(EXAMPLES_DIR / f"{name}.yaml")


def device_class_files() -> list[Path]:
    """Tessera's DeviceClasses and policies (deviceclasses/*.yaml), or the scenarios' own copy of the three
    basic classes when that directory is missing."""
    files = sorted(DEVICECLASSES_DIR.glob("*.yaml"))
    return files or [FALLBACK_DEVICECLASSES]


def device_classes() -> list[Json]:
    """The DeviceClasses of those files, without the policies beside them."""
    return [d for path in device_class_files() for d in load(path) if d.get("kind") == "DeviceClass"]


def find(documents: Sequence[Json], kind: str, name: str) -> Json:
    for d in documents:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise KeyError(f"no {kind} {name!r} in the documents")


def pinned(pod: Json, node: str, *, name: str | None = None) -> Json:
    """A copy of `pod` bound by nodeSelector to `node` (and renamed)."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    if name is not None:
        out["metadata"]["name"] = name
    return out


def renamed(doc: Json, name: str) -> Json:
    out = copy.deepcopy(doc)
    out["metadata"]["name"] = name
    return out


@dataclass(frozen=True, slots=True)
class DeviceRow:
    pod: str
    node: str
    claim: str
    request: str
    device: str
    limits: str


def _mib(quantity: Any) -> str:
    text = str(quantity)
    return text if text.endswith(("Mi", "Gi")) else f"{text} B"


def _limits(result: Json, claim: Json) -> str:
    consumed = result.get("consumedCapacity") or {}
    parts = []
    if Cap.MEMORY in consumed:
        parts.append(f"memory {_mib(consumed[Cap.MEMORY])}")
    if Cap.CORES in consumed:
        parts.append(f"cores {consumed[Cap.CORES]}%")
    for status in (claim.get("status") or {}).get("devices") or []:
        if status.get("device") == result["device"] and status.get("shareID") == result.get("shareID"):
            data = status.get("data") or {}
            mig = data.get("migUUID") or data.get("migDeviceUUID") or data.get("uuid")
            if mig and str(mig).startswith("MIG-"):
                parts.append(str(mig))
    return ", ".join(parts) or "whole device"


def device_rows(api: k8s.ApiClient, namespace: str, pod: Json) -> list[DeviceRow]:
    name = pod["metadata"]["name"]
    node = pod["spec"].get("nodeName") or "(pending)"
    entries = [ref["name"] for ref in pod["spec"].get("resourceClaims") or []]
    claims: list[str] = []
    for entry in entries:
        try:
            claims.append(pod_claim_name(pod, entry))
        except StandInError:  # not generated yet: the pod shows as pending
            continue
    extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        claims.append(str(extended))
    rows: list[DeviceRow] = []
    for claim_name in claims:
        claim = get_claim(api, namespace, claim_name)
        if claim is None:
            continue
        for result in allocated_results(claim):
            if result.get("driver") != DRIVER_NAME:
                continue
            rows.append(
                DeviceRow(
                    pod=name,
                    node=node,
                    claim=claim_name,
                    request=str(result["request"]),
                    device=str(result["device"]),
                    limits=_limits(result, claim),
                )
            )
    if not rows:
        rows.append(
            DeviceRow(pod=name, node=node, claim="-", request="-", device="(none allocated)", limits="-")
        )
    return rows


def table(rows: Sequence[DeviceRow]) -> str:
    header = ("POD", "NODE", "REQUEST", "DEVICE", "LIMITS")
    body = [(r.pod, r.node, r.request, r.device, r.limits) for r in rows]
    widths = [max(len(line[k]) for line in [header, *body]) for k in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(widths[k]) for k, cell in enumerate(line)).rstrip() for line in [header, *body]
    )
