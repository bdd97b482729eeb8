"""Where claims are read from and where their device status is written: the API server.

Prepare reads each claim through a `ClaimSource` and writes status through a `ClaimStatusWriter`; test
harnesses give their own (tests/support/claim_files.py) with the same `kubernetes` v1 model objects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.errors import ClaimError, ClaimNotFoundError, StorageError

log = structlog.get_logger(__name__)
CLAIM_MODEL = "ResourceV1ResourceClaim"
READY_CONDITION = "Ready"
_CONFLICT_RETRIES = 3


class ClaimSource(Protocol):
    def get(self, *, namespace: str, name: str) -> Any:
        """The claim as `kubernetes.client.ResourceV1ResourceClaim`; ClaimNotFoundError if absent."""
        ...


class ApiClaimSource:
    def __init__(self, *, api: Any) -> None:  # kubernetes.client.ResourceV1Api
        self._api = api

    def get(self, *, namespace: str, name: str) -> Any:
        try:
            return self._api.read_namespaced_resource_claim(name=name, namespace=namespace)
        except ApiException as e:
            if e.status == 404:
                raise ClaimNotFoundError(
                    f"ResourceClaim {namespace}/{name} not found in the API server"
                ) from e
            raise ClaimError(f"reading ResourceClaim {namespace}/{name}: {e.status} {e.reason}") from e


@functools.cache
def _codec() -> Any:
    # One client for (de)serialising only; creating one per call costs more than decoding a claim.
    return k8s.ApiClient()


def to_api_dict(obj: object) -> Any:
    """A v1 model object in its API (camelCase) form."""
    return _codec().sanitize_for_serialization(obj)


def claim_from_dict(data: Mapping[str, Any]) -> Any:
    """A claim object (as `kubectl get -o json` prints it) decoded into the client's v1 model: the inverse of
    `to_api_dict`."""
    return _codec().deserialize(json.dumps(data, default=str), CLAIM_MODEL, "application/json")


# ---- status.devices -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """What `kubectl describe resourceclaim` shows for one prepared device."""

    device: str
    pool: str
    share_id: str | None
    data: Mapping[str, Any]


class ClaimStatusWriter(Protocol):
    def publish(
        self, *, namespace: str, name: str, uid: str, driver: str, devices: Sequence[DeviceStatus]
    ) -> None: ...

    def clear(self, *, namespace: str, name: str, uid: str, driver: str) -> None: ...


class NullClaimStatusWriter:
    """Writes no claim status: for claims that have nowhere to keep it (no API server, claims in files)."""

    def publish(
        self, *, namespace: str, name: str, uid: str, driver: str, devices: Sequence[DeviceStatus]
    ) -> None:
        return None

    def clear(self, *, namespace: str, name: str, uid: str, driver: str) -> None:
        return None


def status_devices(
    existing: Sequence[Mapping[str, Any]], *, driver: str, devices: Sequence[DeviceStatus], now: datetime
) -> list[dict[str, Any]]:
    """`status.devices` with our driver's entries replaced and every other driver's entries kept."""
    out = [dict(e) for e in existing if e.get("driver") != driver]
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for d in devices:
        entry: dict[str, Any] = {
            "driver": driver,
            "pool": d.pool,
            "device": d.device,
            "conditions": [
                {
                    "type": READY_CONDITION,
                    "status": "True",
                    "reason": "Prepared",
                    "message": "prepared by the node plugin",
                    "lastTransitionTime": stamp,
                }
            ],
            "data": dict(d.data),
        }
        if d.share_id:
            entry["shareID"] = d.share_id
        out.append(entry)
    return out


class ApiClaimStatusWriter:
    """Patches `resourceclaims/status`, conditional on resourceVersion, retrying on conflicts."""

    def __init__(self, *, api: Any) -> None:  # kubernetes.client.ResourceV1Api
        self._api = api

    def _replace_ours(
        self, *, namespace: str, name: str, uid: str, driver: str, devices: Sequence[DeviceStatus]
    ) -> None:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                claim = self._api.read_namespaced_resource_claim(name=name, namespace=namespace)
                if claim.metadata.uid != uid:
                    return  # deleted and re-created: the new claim is not ours to describe
                raw = to_api_dict(claim.status.devices or []) if claim.status else []
                body = {
                    "metadata": {"resourceVersion": claim.metadata.resource_version},
                    "status": {
                        "devices": status_devices(raw, driver=driver, devices=devices, now=datetime.now(UTC))
                    },
                }
                self._api.patch_namespaced_resource_claim_status(
                    name=name, namespace=namespace, body=body, _content_type="application/merge-patch+json"
                )
                return
            except ApiException as e:
                if e.status == 404:
                    return
                if e.status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                raise StorageError(
                    f"writing status of ResourceClaim {namespace}/{name}: {e.status} {e.reason}"
                ) from e

    def publish(
        self, *, namespace: str, name: str, uid: str, driver: str, devices: Sequence[DeviceStatus]
    ) -> None:
        self._replace_ours(namespace=namespace, name=name, uid=uid, driver=driver, devices=devices)

    def clear(self, *, namespace: str, name: str, uid: str, driver: str) -> None:
        self._replace_ours(namespace=namespace, name=name, uid=uid, driver=driver, devices=())
