"""The Kubernetes release and every knob that depends on it, in one place.

The release is `$K8S_VERSION` or the repository's default (`releases.py`); its components run with that
release's **default** feature gates. `$TESSERA_K8S_GATES=sharing` switches on what a user of an older
release must enable for Tessera's sharing families (nothing on 1.36 and newer). A test that needs another
gate starts a plane of its own with it, and says why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.releases import GATE_PROFILES, Release, release

RELEASE: Final[Release] = release()
K8S_VERSION: Final = RELEASE.version
GATE_PROFILE: Final = os.environ.get("TESSERA_K8S_GATES") or "default"
if GATE_PROFILE not in GATE_PROFILES:
    raise ControlPlaneError(
        f"TESSERA_K8S_GATES={GATE_PROFILE!r} is unknown; use one of {', '.join(GATE_PROFILES)}"
    )
# The gates the session's plane (and the real node's kubelet) set: none, or the sharing profile's.
FEATURE_GATES: Final[dict[str, bool]] = RELEASE.profile(GATE_PROFILE)

RUNTIME_CONFIG: Final = "api/all=true"

# Controllers DRA needs, plus what pods and namespaces need to be admitted and cleaned up. Those behind a
# gate are asked for only where the gate is on (`kcm_controllers`).
KCM_CONTROLLERS: Final[tuple[str, ...]] = (
    "resourceclaim-controller",
    "device-taint-eviction-controller",
    # the chart's node plugin DaemonSet on the real node (e2e/realnode/chart.py)
    "daemonset-controller",
    # the chart's admission webhook on the real node (e2e/scenarios/realnode/test_real_admission.py): its
    # Deployment, its Service's endpoints, which the API server calls (--enable-aggregator-routing), its PDB
    "deployment-controller",
    "replicaset-controller",
    "endpointslice-controller",
    "disruption-controller",
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


GATED_CONTROLLERS: Final[dict[str, str]] = {
    "device-taint-eviction-controller": "DRADeviceTaints",
    "resourcepoolstatusrequest-controller": "DRAResourcePoolStatus",
}


def feature_gates(
    override: Mapping[str, bool] | None = None, *, of: Release = RELEASE, profile: str = GATE_PROFILE
) -> dict[str, bool]:
    """The gates of `profile` on release `of` with `override` merged over them (e.g. a gate switched on or off
    to test degrading). Only gates the release knows may be set: an unknown gate is a start-up error of every
    component."""
    unknown = sorted(set(override or {}) - set(of.defaults))
    if unknown:
        raise ControlPlaneError(
            f"feature gate {unknown[0]!r} is not a gate Kubernetes {of.version} knows "
            f"(e2e/controlplane/releases.py; known: {', '.join(sorted(of.defaults))})"
        )
    return {**of.profile(profile), **(override or {})}


def feature_gates_args(gates: Mapping[str, bool]) -> list[str]:
    """`--feature-gates=...`, or nothing when the release's defaults are all there is."""
    if not gates:
        return []
    return [
        "--feature-gates=" + ",".join(f"{n}={'true' if on else 'false'}" for n, on in sorted(gates.items()))
    ]


def kcm_controllers(gates: Mapping[str, bool], *, of: Release = RELEASE) -> tuple[str, ...]:
    on = of.effective(gates)
    return tuple(c for c in KCM_CONTROLLERS if on.get(GATED_CONTROLLERS.get(c, "DynamicResourceAllocation")))


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
