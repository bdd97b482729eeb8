"""The Kubernetes version and every knob that depends on it, in one place.

The gate list was checked against the real 1.36.3 binaries: an unknown gate, or a locked gate set the
other way, makes every component refuse to start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from e2e.controlplane.errors import ControlPlaneError

K8S_VERSION: Final = "v1.36.3"
ETCD_VERSION: Final = "v3.6.8"

# Every DRA gate the 1.36.3 binaries know that is not locked, switched on. Locked on (so absent, though on):
# DynamicResourceAllocation and DRAAdminAccess. GenericWorkload is no DRA gate but DRAWorkloadResourceClaims
# depends on it, and a gate whose dependency is off is a start-up error.
FEATURE_GATES: Final[dict[str, bool]] = {
    "DRAConsumableCapacity": True,
    "DRADeviceBindingConditions": True,
    "DRADeviceTaintRules": True,
    "DRADeviceTaints": True,
    "DRAExtendedResource": True,
    "DRAListTypeAttributes": True,
    "DRANodeAllocatableResources": True,
    "DRAPartitionableDevices": True,
    "DRAPrioritizedList": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAResourceClaimGranularStatusAuthorization": True,
    "DRAResourcePoolStatus": True,
    "DRASchedulerFilterTimeout": True,
    "DRAWorkloadResourceClaims": True,
    "GenericWorkload": True,
}

RUNTIME_CONFIG: Final = "api/all=true"

# Controllers DRA needs, plus what pods and namespaces need to be admitted and cleaned up.
KCM_CONTROLLERS: Final[tuple[str, ...]] = (
    "resourceclaim-controller",
    "device-taint-eviction-controller",
    # the chart's node plugin DaemonSet on the real node (e2e/realnode/chart.py)
    "daemonset-controller",
    "resourcepoolstatusrequest-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
)

# NodeRestriction on top of the defaults so node identities are held to what a real cluster allows them.
ENABLED_ADMISSION_PLUGINS: Final[tuple[str, ...]] = ("NodeRestriction",)

SERVICE_CLUSTER_IP_RANGE: Final = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"


def feature_gates(override: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """FEATURE_GATES with `override` merged over it (e.g. a gate switched off to test degrading). Only gates
    listed above may be overridden, so every gate the plane knows stays in this one place."""
    unknown = sorted(set(override or {}) - set(FEATURE_GATES))
    if unknown:
        raise ControlPlaneError(
            f"feature gate {unknown[0]!r} is not in e2e.controlplane.settings.FEATURE_GATES; "
            f"add it there (known: {', '.join(sorted(FEATURE_GATES))})"
        )
    return {**FEATURE_GATES, **(override or {})}


def feature_gates_flag(gates: Mapping[str, bool] = FEATURE_GATES) -> str:
    return ",".join(f"{name}={'true' if on else 'false'}" for name, on in sorted(gates.items()))


@dataclass(frozen=True, slots=True)
class ClientRate:
    """A component's client-side rate limit towards the API server (token bucket: `qps` refill, `burst`)."""

    qps: float
    burst: int

    def __post_init__(self) -> None:
        if self.qps <= 0 or self.burst < 1:
            raise ControlPlaneError(f"client rate qps={self.qps} burst={self.burst}: both must be positive")


@dataclass(frozen=True, slots=True)
class ClientRates:
    """The client rates of kube-controller-manager (its resourceclaim-controller creates a pod's claims from
    templates: one create plus one pod-status write per claim) and kube-scheduler (per pod: the claim's
    allocation and the binding; events go through a second client with the same limits)."""

    name: str
    controller_manager: ClientRate
    scheduler: ClientRate


# The upstream defaults: kube-controller-manager --kube-api-qps 20 / --kube-api-burst 30, kube-scheduler
# clientConnection 50 / 100. The e2e control plane runs with them unless told otherwise.
UPSTREAM_DEFAULTS: Final = ClientRates(
    name="defaults", controller_manager=ClientRate(qps=20, burst=30), scheduler=ClientRate(qps=50, burst=100)
)
# What a cluster that takes bursts of GPU pods would run (docs/performance.md): 200 pods at once need about
# 400 writes from each component, so the burst absorbs them and the refill keeps 100 pods/s. Kubernetes'
# own 5000-node scalability runs use 100/100 for both (sig-release, release-1.9 validation report).
PRODUCTION: Final = ClientRates(
    name="production",
    controller_manager=ClientRate(qps=200, burst=400),
    scheduler=ClientRate(qps=200, burst=400),
)
CLIENT_RATES: Final[dict[str, ClientRates]] = {r.name: r for r in (UPSTREAM_DEFAULTS, PRODUCTION)}


def client_rates(name: str) -> ClientRates:
    try:
        return CLIENT_RATES[name]
    except KeyError:
        raise ControlPlaneError(
            f"client rates {name!r} are not defined; use one of {', '.join(CLIENT_RATES)}"
        ) from None
