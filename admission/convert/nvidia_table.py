"""The table of docs/migration-from-nvidia-dra.md, made by running the conversion (pure).

Each row is an NVIDIA request (or a selector's reference) put through `convert_claim` (or `rewrite`) and what
came out, or the refusal's reason: the table is what the code does, and a test holds the document equal to
it (`python -m admission.convert.nvidia_table` prints it).
"""

from __future__ import annotations

import sys
from typing import Any

from admission.convert.nvidia_cel import ATTRIBUTES, CAPACITIES, UNMAPPED, rewrite
from admission.convert.nvidia_claims import REFUSED_CLASSES, convert_claim
from dra_driver.vocabulary.errors import ConversionError

_API = "resource.nvidia.com/v1beta1"


def _config(kind: str, sharing: dict[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": _API, "kind": kind}
    if sharing is not None:
        params["sharing"] = sharing
    return {"opaque": {"driver": "gpu.nvidia.com", "parameters": params}}


_MPS = {
    "strategy": "MPS",
    "mpsConfig": {"defaultActiveThreadPercentage": 30, "defaultPinnedDeviceMemoryLimit": "8Gi"},
}
# (what the row shows of NVIDIA's request, the DeviceClass, the config it comes with)
CASES: tuple[tuple[str, str, dict[str, Any] | None], ...] = (
    ("`gpu.nvidia.com`", "gpu.nvidia.com", None),
    (
        "`gpu.nvidia.com`, `GpuConfig` `TimeSlicing` (`interval: Long`)",
        "gpu.nvidia.com",
        _config("GpuConfig", {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
    ),
    (
        "`gpu.nvidia.com`, `GpuConfig` `MPS` (`defaultActiveThreadPercentage: 30`, "
        "`defaultPinnedDeviceMemoryLimit: 8Gi`)",
        "gpu.nvidia.com",
        _config("GpuConfig", _MPS),
    ),
    (
        "`gpu.nvidia.com`, `GpuConfig` `MPS` with `defaultPerDevicePinnedMemoryLimit`",
        "gpu.nvidia.com",
        _config(
            "GpuConfig", {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"}}}
        ),
    ),
    ("`mig.nvidia.com` (CEL on `profile`)", "mig.nvidia.com", None),
    (
        "`mig.nvidia.com`, `MigDeviceConfig` `TimeSlicing`",
        "mig.nvidia.com",
        _config("MigDeviceConfig", {"strategy": "TimeSlicing"}),
    ),
    (
        "`mig.nvidia.com`, `MigDeviceConfig` `MPS`",
        "mig.nvidia.com",
        _config("MigDeviceConfig", {"strategy": "MPS"}),
    ),
    *((f"`{cls}`", cls, None) for cls in sorted(REFUSED_CLASSES)),
    (
        "`gpu.nvidia.com`, `VfioDeviceConfig`",
        "gpu.nvidia.com",
        _config("VfioDeviceConfig", None),
    ),
)


def _outcome(cls: str, config: dict[str, Any] | None) -> str:
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}
    if config is not None:
        devices["config"] = [config]
    claim = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": devices}},
    }
    try:
        result = convert_claim(claim)
    except ConversionError as e:
        return "refused: " + str(e).rpartition(": ")[2]
    [summary] = result.summary
    text = summary.removeprefix("request gpu: ")
    notes = "; ".join(n.rpartition(": ")[2] for n in result.notes)
    return f"{text}; {notes}" if notes else text


def _reference(field: str, name: str) -> str:
    nvidia = f"device.{field}['gpu.nvidia.com'].{name}"
    try:
        return f"`{rewrite(nvidia)}`"
    except ConversionError as e:
        return "refused: " + str(e).rpartition(": ")[2]


def render() -> str:
    lines = ["| NVIDIA DRA driver v0.4.1 | Tessera |", "|---|---|"]
    lines += [f"| {shown} | {_outcome(cls, config)} |" for shown, cls, config in CASES]
    lines += ["", "| in a CEL selector or constraint | on Tessera |", "|---|---|"]
    for field, names in (("attributes", sorted({*ATTRIBUTES, *UNMAPPED})), ("capacity", sorted(CAPACITIES))):
        lines += [f"| `device.{field}['gpu.nvidia.com'].{n}` | {_reference(field, n)} |" for n in names]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
