"""Pods and claims for the real node: the probe image (e2e/realnode/probe.c) in every container, pinned to the
node and tolerating its taint. The image has no CUDA library of its own and sets NVIDIA_VISIBLE_DEVICES=all
as CUDA base images do: libcuda.so.1 comes only from the claim's CDI spec (the driver root's files, found by
the loader in its system search path), and the only GPUs are the claim's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from e2e.harness.kube import Json
from e2e.realnode.config import PROBE_IMAGE, REALNODE_TAINT_KEY


@dataclass(frozen=True, slots=True)
class ProbeContainer:
    name: str
    args: tuple[str, ...]  # cudaprobe mode and its argument: ("fill",), ("hold", "1000"), ("report",) ...
    claims: tuple[str, ...] = ()  # pod resourceClaims entries, or "entry/request"
    env: dict[str, str] = field(default_factory=dict)


def _claim_ref(ref: str) -> Json:
    entry, _, request = ref.partition("/")
    return {"name": entry, "request": request} if request else {"name": entry}


def probe_pod(
    name: str,
    *,
    node: str,
    containers: Sequence[ProbeContainer],
    templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
) -> Json:
    """A pod of probe containers on `node`. `templates`: entry → ResourceClaimTemplate; `claims`: entry →
    ResourceClaim."""
    resource_claims = [{"name": e, "resourceClaimTemplateName": t} for e, t in (templates or {}).items()]
    resource_claims += [{"name": e, "resourceClaimName": c} for e, c in (claims or {}).items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": REALNODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "dnsPolicy": "Default",
            "enableServiceLinks": False,
            "resourceClaims": resource_claims,
            "containers": [
                {
                    "name": c.name,
                    "image": PROBE_IMAGE,
                    "args": list(c.args),
                    "env": [
                        {"name": k, "value": v} for k, v in {"NVIDIA_VISIBLE_DEVICES": "all", **c.env}.items()
                    ],
                    "resources": {"claims": [_claim_ref(r) for r in c.claims]},
                }
                for c in containers
            ],
        },
    }


def claim_spec(device_class: str, *, capacity: dict[str, str] | None = None, request: str = "gpu") -> Json:
    exactly: Json = {"deviceClassName": device_class}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"devices": {"requests": [{"name": request, "exactly": exactly}]}}


def claim_template(name: str, spec: Json) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": spec},
    }


def resource_claim(name: str, spec: Json) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def vgpu(memory: str, cores: str) -> Json:
    return claim_spec("vgpu.tessera.dev", capacity={"memory": memory, "cores": cores})


def whole_gpu() -> Json:
    return claim_spec("gpu.tessera.dev")


def mig(profile: str) -> Json:
    return claim_spec(f"mig-{profile}.gpu.tessera.dev")


def mps(memory: str, cores: str) -> Json:
    return claim_spec("mps.tessera.dev", capacity={"memory": memory, "cores": cores})
