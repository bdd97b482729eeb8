"""Which GPU products the cluster offers, as far as a conversion needs to know (pure).

HAMi's requests are relative to a GPU (`gpumem-percentage: 50`, dynamic MIG's "smallest instance that holds
gpumem"), but a claim's capacity request is an absolute quantity. The conversion therefore writes one
alternative per product (`firstAvailable`), and refuses what no product can hold. The webhook builds its
catalog from the ResourceSlices it sees (`from_slices`); `tessera convert` and a cluster without slices use
every product Tessera knows (`known_products`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dra_driver.core.profiles import PRODUCTS, GpuProduct
from dra_driver.values.names import DRIVER_NAME, Attr, Cap, qualified
from dra_driver.values.quantity import parse_quantity

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, order=True)
class MigOption:
    """A MIG profile of a product, ordered smallest first (memory, then compute slices)."""

    memory_mib: int
    compute_slices: int
    name: str


@dataclass(frozen=True, slots=True)
class Product:
    """One GPU product: NVML's product name, its memory and the MIG profiles it offers (none: no MIG)."""

    name: str
    memory_mib: int
    mig: tuple[MigOption, ...] = ()

    def smallest_profile(self, memory_mib: int) -> MigOption | None:
        """The smallest MIG profile holding `memory_mib`; profiles with media extensions (`+me`) are never
        chosen, they are for who asks for them."""
        fits = [m for m in self.mig if m.memory_mib >= memory_mib and "+" not in m.name]
        return min(fits) if fits else None


@dataclass(frozen=True, slots=True)
class Catalog:
    products: tuple[Product, ...]

    @property
    def largest_memory_mib(self) -> int:
        return max((p.memory_mib for p in self.products), default=0)

    def describe(self) -> str:
        return ", ".join(f"{p.name} ({p.memory_mib} MiB)" for p in self.products) or "no GPU"


def _product(p: GpuProduct) -> Product:
    return Product(
        name=p.product_name,
        memory_mib=p.memory_mib,
        mig=tuple(sorted(MigOption(m.memory_mib, m.compute_slices, m.name) for m in p.mig_profiles)),
    )


def known_products() -> Catalog:
    """Every product of Tessera's tables (dra_driver/core/profiles.py)."""
    return Catalog(tuple(_product(p) for p in PRODUCTS))


def _attribute(device: Mapping[str, object], name: str) -> object:
    attributes = device.get("attributes")
    value = attributes.get(qualified(name)) if isinstance(attributes, Mapping) else None
    return next(iter(value.values()), None) if isinstance(value, Mapping) and value else None


def _memory_mib(device: Mapping[str, object]) -> int | None:
    capacity = device.get("capacity")
    entry = capacity.get(Cap.MEMORY) if isinstance(capacity, Mapping) else None
    value = entry.get("value") if isinstance(entry, Mapping) else None
    if value is None:
        return None
    return int(parse_quantity(value).value // MIB)


def from_slices(slices: Iterable[Mapping[str, object]]) -> Catalog:
    """The products Tessera's ResourceSlices publish: a whole GPU's or a shared device's memory is the
    product's, a MIG device's memory is its profile's. Slices of other drivers are ignored."""
    memory: dict[str, int] = {}
    mig: dict[str, set[MigOption]] = {}
    for s in slices:
        spec = s.get("spec")
        if not isinstance(spec, Mapping) or spec.get("driver") != DRIVER_NAME:
            continue
        devices = spec.get("devices")
        for d in devices if isinstance(devices, list) else ():
            if not isinstance(d, Mapping):
                continue
            name, kind, mib = _attribute(d, Attr.PRODUCT_NAME), _attribute(d, Attr.TYPE), _memory_mib(d)
            if not isinstance(name, str) or mib is None:
                continue
            profile = _attribute(d, Attr.PROFILE)
            if kind == "mig" and isinstance(profile, str):
                compute = int(profile.split("g.", 1)[0]) if "g." in profile else 0
                mig.setdefault(name, set()).add(MigOption(mib, compute, profile))
            elif kind in ("gpu", "vgpu", "mps"):
                memory[name] = max(memory.get(name, 0), mib)
    names = sorted(set(memory) | set(mig))
    # A GPU published only as MIG devices (Ampere in MIG mode) has its product's memory in Tessera's tables.
    known = {p.name: p.memory_mib for p in known_products().products}
    return Catalog(
        tuple(
            Product(name, memory.get(name) or known.get(name, 0), tuple(sorted(mig.get(name, ()))))
            for name in names
        )
    )
