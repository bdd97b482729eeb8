"""ResourceSlices as nodes publish them, for the admission catalog's tests: one device per call, with any
value in any field (a hostile node's too)."""

from __future__ import annotations

from typing import Any

from admission.convert.catalog import MigOption, Product

H100 = "NVIDIA H100 80GB HBM3"
INJECTION = 'AAA" || "a" == "a'


def device(
    name: str, kind: str, product: object, memory: object = "81559Mi", profile: object = None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gpu.tessera.dev/type": {"string": kind}}
    if product is not None:
        attributes["gpu.tessera.dev/productName"] = {"string": product}
    if profile is not None:
        attributes["gpu.tessera.dev/profile"] = {"string": profile}
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def slice_of(name: str, *devices: object, driver: str = "gpu.tessera.dev") -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "devices": list(devices)},
    }


GOOD = slice_of(
    "node-a-gpu",
    device("gpu-0-vgpu", "vgpu", H100),
    device("gpu-0-mig-1g10gb-0", "mig", H100, "9856Mi", "1g.10gb"),
    device("gpu-0-mig-3g40gb-0", "mig", H100, "40192Mi", "3g.40gb"),
)
L4 = slice_of("node-b-gpu", device("gpu-0", "gpu", "NVIDIA L4", "23034Mi"))
EXPECTED = (
    Product(H100, 81559, (MigOption(9856, 1, "1g.10gb"), MigOption(40192, 3, "3g.40gb"))),
    Product("NVIDIA L4", 23034),
)
