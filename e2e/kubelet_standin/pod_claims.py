"""Which ResourceClaims a pod uses and which of their requests each container gets, read from the pod as the
kubelet reads it (plain API JSON): `spec.resourceClaims` by name or through
`status.resourceClaimStatuses` for templates, and the scheduler's claim for extended resources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Json = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """One claim a container uses: the whole claim (`request` None) or one request of it."""

    claim_name: str
    request: str | None


@dataclass(frozen=True, slots=True)
class PodClaims:
    claim_names: tuple[str, ...]  # every claim the pod needs, in spec order, extended-resource claim last
    pending: tuple[str, ...]  # pod claim entries whose generated claim is not known yet
    containers: Mapping[str, tuple[ClaimUse, ...]]  # container name → what it uses (init containers too)


def _generated_names(pod: Json) -> dict[str, str | None]:
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return {s["name"]: s.get("resourceClaimName") for s in statuses if "name" in s}


def _containers(pod: Json) -> list[Json]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def pod_claims(pod: Json) -> PodClaims:
    spec = pod.get("spec") or {}
    generated = _generated_names(pod)
    by_entry: dict[str, str] = {}
    pending: list[str] = []
    for entry in spec.get("resourceClaims") or []:
        name = entry["name"]
        if entry.get("resourceClaimName"):
            by_entry[name] = entry["resourceClaimName"]
        elif entry.get("resourceClaimTemplateName"):
            if name not in generated:
                pending.append(name)
            elif generated[name]:
                by_entry[name] = str(generated[name])
            # present with no claim name: the controller decided no claim is needed
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    extended_claim = extended.get("resourceClaimName")
    containers: dict[str, tuple[ClaimUse, ...]] = {}
    for container in _containers(pod):
        uses: list[ClaimUse] = []
        for ref in (container.get("resources") or {}).get("claims") or []:
            claim = by_entry.get(ref["name"])
            if claim is not None:
                uses.append(ClaimUse(claim_name=claim, request=ref.get("request") or None))
        if extended_claim:
            uses.extend(
                ClaimUse(claim_name=extended_claim, request=m["requestName"])
                for m in extended.get("requestMappings") or []
                if m.get("containerName") == container["name"]
            )
        containers[container["name"]] = tuple(uses)
    names = list(dict.fromkeys(by_entry.values()))
    if extended_claim and extended_claim not in names:
        names.append(extended_claim)
    return PodClaims(claim_names=tuple(names), pending=tuple(pending), containers=containers)


def base_request(request: str) -> str:
    """`gpu/mig` (a firstAvailable subrequest) → `gpu`: containers name the parent request."""
    return request.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str = ""


def cdi_ids_for(
    uses: Sequence[ClaimUse], prepared: Mapping[str, Sequence[PreparedDevice]]
) -> tuple[str, ...]:
    """The CDI ids a container receives: all devices of a claim it names, or those of the one request it
    names (a device prepared for a subrequest counts for the parent request)."""
    ids: list[str] = []
    for use in uses:
        for device in prepared.get(use.claim_name, ()):
            if use.request is None or use.request in {base_request(r) for r in device.request_names}:
                ids.extend(device.cdi_device_ids)
    return tuple(dict.fromkeys(ids))


def claim_is_ready(claim: Json, pod_uid: str) -> bool:
    """Allocated and reserved for this pod: what the scheduler guarantees before it binds."""
    status = claim.get("status") or {}
    reserved = status.get("reservedFor") or []
    return bool(status.get("allocation")) and any(r.get("uid") == pod_uid for r in reserved)


def drivers_of(claim: Json) -> set[str]:
    results = (
        (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    ) or []
    return {r["driver"] for r in results if "driver" in r}
