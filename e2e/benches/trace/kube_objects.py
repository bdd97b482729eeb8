"""A trace pod as the Kubernetes objects that ask for it (pure): the Pod with its CPU and memory requests
and, when it asks for a GPU, its ResourceClaim.

- a share of one GPU: a `vgpu.tessera.dev` claim; since its memory in MiB depends on the GPU it lands on,
  one `firstAvailable` alternative per model the pod may use (the shape `tessera convert` gives HAMi's
  `gpumem-percentage`), each selecting that model and asking for its share (e2e.benches.trace.gpu_models);
- N whole GPUs: a `gpu.tessera.dev` claim of count N (devices of one node, as every claim's);
- `gpu_spec`: the claim's CEL selectors on the product name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.core.profiles import GpuProduct
from dra_driver.vocabulary.cel_literal import cel_list, cel_string
from dra_driver.vocabulary.names import ATTRIBUTE_DOMAIN, Attr, Cap
from e2e.benches.trace.gpu_models import share_of
from e2e.benches.trace.records import Ask, TraceError, TracePod

Json = dict[str, Any]
IMAGE = "registry.k8s.io/pause:3.10"
REQUEST = "gpu"
MAX_ALTERNATIVES = 8  # a request's firstAvailable holds at most 8 subrequests
PRODUCT = f'device.attributes["{ATTRIBUTE_DOMAIN}"].{Attr.PRODUCT_NAME}'


def eligible(pod: TracePod, models: Sequence[GpuProduct]) -> list[GpuProduct]:
    """The cluster's models (`models`, in order) that the pod's `gpu_spec` allows."""
    if not pod.gpu_spec:
        return list(models)
    unknown = [m for m in pod.gpu_spec if m not in {p.key for p in models}]
    if unknown:
        raise TraceError(
            f"pod {pod.name}: gpu_spec names {', '.join(unknown)}, which no node of the cluster has "
            f"(its models: {', '.join(p.key for p in models)})"
        )
    return [p for p in models if p.key in pod.gpu_spec]


def _is(products: Sequence[GpuProduct]) -> str:
    if len(products) == 1:
        return f"{PRODUCT} == {cel_string(products[0].product_name)}"
    return f"{PRODUCT} in {cel_list([p.product_name for p in products])}"


def _share(pod: TracePod, product: GpuProduct) -> Json:
    share = share_of(product, pod.gpu_milli)
    return {
        "deviceClassName": "vgpu.tessera.dev",
        "selectors": [{"cel": {"expression": _is([product])}}],
        "capacity": {"requests": {Cap.MEMORY: f"{share.memory_mib}Mi", Cap.CORES: str(share.cores)}},
    }


def claim_request(pod: TracePod, models: Sequence[GpuProduct]) -> Json:
    """The claim's one device request for a pod that asks for a GPU."""
    allowed = eligible(pod, models)
    if pod.ask is Ask.WHOLE:
        body: Json = {
            "deviceClassName": "gpu.tessera.dev",
            "allocationMode": "ExactCount",
            "count": pod.num_gpu,
        }
        if pod.gpu_spec:
            body["selectors"] = [{"cel": {"expression": _is(allowed)}}]
        return {"name": REQUEST, "exactly": body}
    if pod.ask is not Ask.SHARE:
        raise TraceError(f"pod {pod.name} asks for no GPU: it needs no claim")
    if len(allowed) == 1:
        return {"name": REQUEST, "exactly": _share(pod, allowed[0])}
    if len(allowed) > MAX_ALTERNATIVES:
        raise TraceError(
            f"pod {pod.name}: a share on any of {len(allowed)} GPU models needs one alternative each, "
            f"and a request holds at most {MAX_ALTERNATIVES}; give it a gpu_spec"
        )
    return {"name": REQUEST, "firstAvailable": [{"name": p.key.lower(), **_share(pod, p)} for p in allowed]}


def claim_object(pod: TracePod, *, name: str, models: Sequence[GpuProduct]) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [claim_request(pod, models)]}},
    }


def pod_object(pod: TracePod, *, name: str, claim: str | None, node_selector: dict[str, str]) -> Json:
    """A pause pod asking for the trace pod's CPU and memory, and for its claim when it has one."""
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    container: Json = {"name": "main", "image": IMAGE, "resources": {"requests": requests}}
    spec: Json = {"restartPolicy": "Never", "nodeSelector": node_selector, "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": REQUEST, "resourceClaimName": claim}]
        container["resources"]["claims"] = [{"name": REQUEST}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
