"""ResourceClaims and ResourceClaimTemplates written for NVIDIA's DRA driver → the same on Tessera (pure).

kubernetes-sigs/dra-driver-nvidia-gpu (v0.4.1) gives a claim a whole GPU (`gpu.nvidia.com`) or a MIG device
(`mig.nvidia.com`), picked by CEL on `device.attributes['gpu.nvidia.com']`; an opaque `GpuConfig` says how the
containers sharing that claim share its GPU: `TimeSlicing` (the GPU's own time slices) or `MPS` (an MPS daemon
for the claim, each client held to `defaultActiveThreadPercentage` and `defaultPinnedDeviceMemoryLimit`).
The nearest Tessera request for each:

- `gpu.nvidia.com` → `gpu.tessera.dev`: a whole GPU, which the claim's containers share as the GPU
  time-slices; with `GpuConfig` `TimeSlicing` the same (the interval stays the driver's default);
- `gpu.nvidia.com` with `GpuConfig` `MPS` → `mps.tessera.dev`, `capacity.requests`: `cores` = the thread
  percentage, `memory` = the pinned-memory limit;
- `mig.nvidia.com` (CEL on `profile`) → `mig.tessera.dev`, the same CEL; the instance is made on demand.

Request names stay (the Pods that name them need no change), selectors are rewritten by `nvidia_cel`,
constraints' attribute names get Tessera's domain, and NVIDIA's opaque configs are dropped once read.
What has no counterpart is refused naming the field and the reason (`UnconvertibleClaimError`):
ComputeDomains, VFIO passthrough, MPS inside a MIG device, per-device pinned-memory limits, attributes
Tessera does not publish.
An object with nothing of NVIDIA's is returned as it is.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.convert.nvidia_cel import ATTRIBUTES, NVIDIA_DOMAIN, STANDARD_DOMAIN, rewrite
from dra_driver.vocabulary.errors import ConfigError, ConversionError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.names import ATTRIBUTE_DOMAIN, Cap, Family, device_class_name
from dra_driver.vocabulary.quantity import parse_quantity

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CONFIG_API = "resource.nvidia.com/v1beta1"
# NVIDIA's classes and drivers that have no Tessera counterpart, and why
REFUSED_CLASSES: dict[str, str] = {
    "compute-domain-daemon.nvidia.com": "ComputeDomains (multi-node NVLink, IMEX) have no counterpart",
    "compute-domain-default-channel.nvidia.com": "ComputeDomain IMEX channels have no counterpart",
    "vfio.gpu.nvidia.com": "passing a GPU through to a VM (vfio-pci) has no Tessera counterpart",
}
REFUSED_DRIVERS: dict[str, str] = {
    "compute-domain.nvidia.com": "ComputeDomains (multi-node NVLink, IMEX) have no counterpart",
}
CLAIM_KINDS: dict[str, tuple[str, ...]] = {
    "ResourceClaim": ("spec",),
    "ResourceClaimTemplate": ("spec", "spec"),
}
_NVIDIA_SUFFIX = ".nvidia.com"
MAX_REQUESTS = 32  # the API's own bound on a claim's requests (and on subrequests of each)
MAX_CONFIGS = 32


class UnconvertibleClaimError(ConversionError):
    """An NVIDIA claim asks for something Tessera has no counterpart for; the message names the field."""


@dataclass(frozen=True, slots=True)
class Sharing:
    """A GpuConfig's (or MigDeviceConfig's) sharing, as read."""

    strategy: str  # "TimeSlicing", "MPS"
    interval: str | None = None
    thread_percent: int | None = None
    pinned_memory: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimConversion:
    """The object as Tessera takes it (`obj`), what of NVIDIA's meaning it does not keep (`notes`) and, per
    request, what it became (`summary`)."""

    obj: dict[str, Any]
    notes: tuple[str, ...]
    summary: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.summary)


def is_nvidia_claim(obj: Mapping[str, Any]) -> bool:
    """Whether a ResourceClaim(Template) names one of NVIDIA's DeviceClasses or opaque-config drivers."""
    spec = _spec(obj)
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    if not isinstance(devices, Mapping):
        return False
    for r in _list(devices.get("requests")):
        for sub in (r.get("exactly"), *_list(r.get("firstAvailable"))) if isinstance(r, Mapping) else ():
            name = sub.get("deviceClassName") if isinstance(sub, Mapping) else None
            if isinstance(name, str) and name.endswith(_NVIDIA_SUFFIX):
                return True
    for c in _list(devices.get("config")):
        opaque = c.get("opaque") if isinstance(c, Mapping) else None
        driver = opaque.get("driver") if isinstance(opaque, Mapping) else None
        if isinstance(driver, str) and driver.endswith(_NVIDIA_SUFFIX):
            return True
    return False


def _spec(obj: Mapping[str, Any]) -> Any:
    holder: Any = obj
    for key in CLAIM_KINDS.get(str(obj.get("kind")), ("spec",)):
        holder = holder.get(key) if isinstance(holder, Mapping) else None
    return holder


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def convert_claim(obj: Mapping[str, Any]) -> ClaimConversion:
    """A ResourceClaim or ResourceClaimTemplate; one with nothing of NVIDIA's comes back unchanged."""
    out: dict[str, Any] = copy.deepcopy(dict(obj))
    path = CLAIM_KINDS.get(str(obj.get("kind")))
    if path is None or not is_nvidia_claim(obj):
        return ClaimConversion(out, (), ())
    where = ".".join(path) + ".devices"
    devices = _spec(out)["devices"]
    notes: list[str] = []
    summary: list[str] = []
    requests = _list(devices.get("requests"))
    configs = _list(devices.get("config"))
    if len(requests) > MAX_REQUESTS or len(configs) > MAX_CONFIGS:
        raise UnconvertibleClaimError(f"{where}: at most {MAX_REQUESTS} requests and {MAX_CONFIGS} configs")
    sharing = _sharing_by_request(configs, where, notes)
    for i, r in enumerate(requests):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise UnconvertibleClaimError(f"{where}.requests[{i}]: a request needs a name")
        name = r["name"]
        if isinstance(r.get("exactly"), dict):
            summary += _request(r["exactly"], f"{where}.requests[{i}].exactly", name, sharing, notes)
        subs = _list(r.get("firstAvailable"))
        if len(subs) > MAX_REQUESTS:
            raise UnconvertibleClaimError(
                f"{where}.requests[{i}].firstAvailable: at most {MAX_REQUESTS} subrequests"
            )
        for j, sub in enumerate(subs):
            if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
                raise UnconvertibleClaimError(
                    f"{where}.requests[{i}].firstAvailable[{j}]: a subrequest needs a name"
                )
            at = f"{where}.requests[{i}].firstAvailable[{j}]"
            summary += _request(sub, at, f"{name}/{sub['name']}", sharing, notes, parent=name)
    kept = [c for c in configs if not _is_nvidia_config(c)]
    if kept:
        devices["config"] = kept
    else:
        devices.pop("config", None)
    for k, constraint in enumerate(_list(devices.get("constraints"))):
        if isinstance(constraint, dict):
            _constraint(constraint, f"{where}.constraints[{k}]")
    return ClaimConversion(out, tuple(dict.fromkeys(notes)), tuple(summary))


def _is_nvidia_config(config: Any) -> bool:
    opaque = config.get("opaque") if isinstance(config, Mapping) else None
    return isinstance(opaque, Mapping) and opaque.get("driver") == GPU_CLASS


def _sharing_by_request(configs: list[Any], where: str, notes: list[str]) -> dict[str, tuple[str, Sharing]]:
    """Request name ("" for every request) → (the config's kind, its sharing), later configs winning."""
    out: dict[str, tuple[str, Sharing]] = {}
    for k, c in enumerate(configs):
        at = f"{where}.config[{k}].opaque"
        opaque = c.get("opaque") if isinstance(c, Mapping) else None
        if not isinstance(opaque, Mapping):
            continue
        driver = opaque.get("driver")
        if isinstance(driver, str) and driver in REFUSED_DRIVERS:
            raise UnconvertibleClaimError(f"{at}.driver: {driver}: {REFUSED_DRIVERS[driver]}")
        if driver != GPU_CLASS:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            raise UnconvertibleClaimError(f"{at}.parameters: expected a GpuConfig or MigDeviceConfig object")
        kind, sharing = _config(params, f"{at}.parameters", notes)
        names = _list(c.get("requests")) or [""]
        for n in names:
            if not isinstance(n, str):
                raise UnconvertibleClaimError(f"{where}.config[{k}].requests: expected request names")
            if sharing is not None:
                out[n] = (kind, sharing)
            else:
                out.pop(n, None)
    return out


def _config(params: Mapping[str, Any], at: str, notes: list[str]) -> tuple[str, Sharing | None]:
    if params.get("apiVersion") != CONFIG_API:
        raise UnconvertibleClaimError(
            f"{at}.apiVersion: {excerpt(params.get('apiVersion'))}; expected {CONFIG_API}"
        )
    kind = params.get("kind")
    if kind not in ("GpuConfig", "MigDeviceConfig"):
        why = "has no Tessera counterpart" if isinstance(kind, str) else "is not a kind"
        raise UnconvertibleClaimError(
            f"{at}.kind: {excerpt(kind)} {why}; GpuConfig and MigDeviceConfig convert"
        )
    raw = params.get("sharing")
    if raw is None:
        return kind, None
    if not isinstance(raw, Mapping):
        raise UnconvertibleClaimError(f"{at}.sharing: expected an object")
    strategy = raw.get("strategy")
    if strategy == "TimeSlicing":
        slicing = raw.get("timeSlicingConfig") or {}
        interval = slicing.get("interval") if isinstance(slicing, Mapping) else None
        if interval not in (None, "Default"):
            notes.append(
                f"{at}.sharing.timeSlicingConfig.interval {excerpt(interval)}: Tessera leaves the GPU's "
                "time slice at the driver's default"
            )
        return kind, Sharing("TimeSlicing", interval=interval if isinstance(interval, str) else None)
    if strategy == "MPS":
        return kind, _mps(raw.get("mpsConfig") or {}, f"{at}.sharing.mpsConfig")
    raise UnconvertibleClaimError(f"{at}.sharing.strategy: {excerpt(strategy)}; TimeSlicing and MPS convert")


def _mps(mps: Any, at: str) -> Sharing:
    if not isinstance(mps, Mapping):
        raise UnconvertibleClaimError(f"{at}: expected an object")
    if mps.get("defaultPerDevicePinnedMemoryLimit"):
        raise UnconvertibleClaimError(
            f"{at}.defaultPerDevicePinnedMemoryLimit: per-device limits have no Tessera counterpart (a "
            "Tessera MPS claim is one share of one GPU); give defaultPinnedDeviceMemoryLimit"
        )
    percent = mps.get("defaultActiveThreadPercentage")
    if percent is not None and (
        not isinstance(percent, int) or isinstance(percent, bool) or not 0 < percent <= 100
    ):
        raise UnconvertibleClaimError(f"{at}.defaultActiveThreadPercentage: {excerpt(percent)}; give 1..100")
    memory = mps.get("defaultPinnedDeviceMemoryLimit")
    if memory is not None:
        try:
            q = parse_quantity(memory)
        except ConfigError as e:
            raise UnconvertibleClaimError(f"{at}.defaultPinnedDeviceMemoryLimit: {e}") from e
        if q.value < (1 << 20):
            raise UnconvertibleClaimError(
                f"{at}.defaultPinnedDeviceMemoryLimit: {excerpt(memory)}; give at least 1Mi"
            )
        memory = str(memory)
    return Sharing("MPS", thread_percent=percent, pinned_memory=memory)


def _request(
    r: dict[str, Any],
    at: str,
    name: str,
    sharing: Mapping[str, tuple[str, Sharing]],
    notes: list[str],
    *,
    parent: str | None = None,
) -> list[str]:
    """One exact request (or subrequest) rewritten in place; its summary line, none if not NVIDIA's."""
    cls = r.get("deviceClassName")
    if not isinstance(cls, str) or not cls.endswith(_NVIDIA_SUFFIX):
        return []
    if cls in REFUSED_CLASSES:
        raise UnconvertibleClaimError(f"{at}.deviceClassName: {cls}: {REFUSED_CLASSES[cls]}")
    if cls not in (GPU_CLASS, MIG_CLASS):
        raise UnconvertibleClaimError(
            f"{at}.deviceClassName: {cls} is not a DeviceClass of NVIDIA's driver v0.4.1"
        )
    if "capacity" in r:
        raise UnconvertibleClaimError(f"{at}.capacity: NVIDIA's devices take no capacity requests; remove it")
    for k, selector in enumerate(_list(r.get("selectors"))):
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expr = cel.get("expression") if isinstance(cel, dict) else None
        if not isinstance(cel, dict) or not isinstance(expr, str):
            raise UnconvertibleClaimError(f"{at}.selectors[{k}]: only CEL selectors convert")
        try:
            cel["expression"] = rewrite(expr)
        except ConversionError as e:
            raise UnconvertibleClaimError(f"{at}.selectors[{k}].cel.expression: {e}") from e
    found = sharing.get(name) or (sharing.get(parent) if parent else None) or sharing.get("")
    kind, share = found if found is not None else ("", None)
    if cls == MIG_CLASS:
        if kind == "GpuConfig":
            raise UnconvertibleClaimError(
                f"{at}: a GpuConfig applies to a MIG device; NVIDIA's driver refuses it too"
            )
        if share is not None and share.strategy == "MPS":
            raise UnconvertibleClaimError(f"{at}: MPS inside a MIG device has no Tessera counterpart")
        if share is not None:
            notes.append(f"request {name}: a MIG device is time-sliced among its containers as it is")
        r["deviceClassName"] = device_class_name(Family("mig"))
        return [f"request {name}: MIG device on Tessera (mig.tessera.dev)"]
    if kind == "MigDeviceConfig":
        raise UnconvertibleClaimError(
            f"{at}: a MigDeviceConfig applies to a whole GPU; NVIDIA's driver refuses it too"
        )
    if share is None or share.strategy == "TimeSlicing":
        r["deviceClassName"] = device_class_name(Family("gpu"))
        how = ", time-sliced among the claim's containers" if share is not None else ""
        return [f"request {name}: whole GPU{how} (gpu.tessera.dev)"]
    r["deviceClassName"] = device_class_name(Family("mps"))
    requests: dict[str, str] = {}
    if share.pinned_memory is not None:
        requests[Cap.MEMORY] = share.pinned_memory
    if share.thread_percent is not None:
        requests[Cap.CORES] = str(share.thread_percent)
    if requests:
        r["capacity"] = {"requests": requests}
    notes.append(
        f"request {name}: an MPS share of a GPU whose other shares other claims may get (NVIDIA's driver "
        "gives the claim the whole GPU); its limits hold for the claim, not for each container"
    )
    shown = ", ".join(f"{k} {v}" for k, v in requests.items()) or "no limits"
    return [f"request {name}: MPS share ({shown}; mps.tessera.dev)"]


def _constraint(constraint: dict[str, Any], at: str) -> None:
    for key in ("matchAttribute", "distinctAttribute"):
        value = constraint.get(key)
        if not isinstance(value, str):
            continue
        domain, _, name = value.rpartition("/")
        if domain == NVIDIA_DOMAIN:
            if name not in ATTRIBUTES:
                raise UnconvertibleClaimError(f"{at}.{key}: {value}: Tessera publishes no attribute {name}")
            constraint[key] = f"{ATTRIBUTE_DOMAIN}/{name}"
        elif domain not in (STANDARD_DOMAIN, ATTRIBUTE_DOMAIN):
            raise UnconvertibleClaimError(f"{at}.{key}: {value}: another driver's attribute")
