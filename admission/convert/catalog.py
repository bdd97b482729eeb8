"""Which GPU products the cluster offers, as far as a conversion needs to know (pure).

HAMi's requests are relative to a GPU (`gpumem-percentage: 50`, dynamic MIG's "smallest instance that holds
gpumem"), but a claim's capacity request is an absolute quantity. The conversion therefore writes one
alternative per product (`firstAvailable`), and refuses what no product can hold. The webhook builds its
catalog from the ResourceSlices it sees (`from_slices`); `tessera convert` and a cluster without slices use
every product Tessera knows (`known_products`).

Any node can publish any ResourceSlice, so nothing in one is trusted: each device is read on its own, and one
the catalog cannot use (a product name that is not a plausible one, a malformed MIG profile, an absurd
memory) is skipped and reported in `Catalog.skipped` (slice, device, field, why); it never stops the others.
Names that are kept reach CEL only through `dra_driver/vocabulary/cel_literal.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dra_driver.core.families.mig import profile_size
from dra_driver.core.families.published import MAX_STRING
from dra_driver.core.profiles import PRODUCTS, GpuProduct
from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.names import DRIVER_NAME, Attr, Cap, qualified
from dra_driver.vocabulary.quantity import parse_quantity

MIB = 1024 * 1024
MAX_MEMORY_MIB = 1 << 24  # 16 TiB: more than any GPU has; a larger memory is a mistake or a lie


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
class Skipped:
    """A device of a ResourceSlice the catalog could not use, and why (values shown as excerpts)."""

    slice: str
    device: str
    field: str
    why: str

    def __str__(self) -> str:
        return f"ResourceSlice {self.slice}, device {self.device}: {self.field}: {self.why}"


@dataclass(frozen=True, slots=True)
class Catalog:
    products: tuple[Product, ...]
    # what the slices held that could not be used; not part of what the catalog is (equality)
    skipped: tuple[Skipped, ...] = field(default=(), compare=False)

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


class _UnusableError(Exception):
    """One field of one device cannot be used; the device is skipped."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(why)
        self.field, self.why = field, why


@dataclass(frozen=True, slots=True)
class _Device:
    """What one usable device says: its product, kind, memory and (MIG) profile."""

    product: str
    kind: object
    memory_mib: int
    mig: MigOption | None


def _attribute(device: Mapping[str, object], name: str) -> object:
    attributes = device.get("attributes")
    value = attributes.get(qualified(name)) if isinstance(attributes, Mapping) else None
    return next(iter(value.values()), None) if isinstance(value, Mapping) and value else None


def _plausible_name(value: object, name: str, what: str) -> str:
    """A name a node may publish: a string of 1-64 printable characters (the API's limit), no surrounding
    space; anything else (control characters, line breaks, lone surrogates, megabytes) is not one."""
    if not isinstance(value, str):
        raise _UnusableError(f"attributes[{qualified(name)}]", f"{excerpt(value)} is not a string")
    if not 0 < len(value) <= MAX_STRING or not value.isprintable() or value != value.strip():
        raise _UnusableError(
            f"attributes[{qualified(name)}]",
            f"{excerpt(value)} is not a {what} (1-{MAX_STRING} printable characters)",
        )
    return value


def _memory_mib(device: Mapping[str, object]) -> int | None:
    capacity = device.get("capacity")
    entry = capacity.get(Cap.MEMORY) if isinstance(capacity, Mapping) else None
    value = entry.get("value") if isinstance(entry, Mapping) else None
    if value is None:
        return None
    where = f"capacity[{Cap.MEMORY}]"
    try:
        mib = parse_quantity(value).value // MIB
    except TesseraError as e:
        raise _UnusableError(where, str(e)) from e
    if not 1 <= mib <= MAX_MEMORY_MIB:
        raise _UnusableError(where, f"{excerpt(value)} is not a GPU's memory (1 MiB to {MAX_MEMORY_MIB} MiB)")
    return int(mib)


def _mig_option(device: Mapping[str, object], memory_mib: int) -> MigOption:
    profile = _plausible_name(_attribute(device, Attr.PROFILE), Attr.PROFILE, "MIG profile")
    try:
        size = profile_size(profile)
    except TesseraError as e:
        raise _UnusableError(f"attributes[{qualified(Attr.PROFILE)}]", str(e)) from e
    return MigOption(memory_mib, size.compute_slices, profile)


def _read_device(device: Mapping[str, object]) -> _Device | None:
    """The device's entry; None for one of another kind, or that names no product or memory (nothing to
    offer, as before any of this was checked)."""
    kind, raw_name = _attribute(device, Attr.TYPE), _attribute(device, Attr.PRODUCT_NAME)
    if kind not in ("mig", "gpu", "vgpu", "mps") or raw_name is None:
        return None
    name = _plausible_name(raw_name, Attr.PRODUCT_NAME, "product name")
    mib = _memory_mib(device)
    if mib is None:
        return None
    return _Device(name, kind, mib, _mig_option(device, mib) if kind == "mig" else None)


def _devices(s: Mapping[str, object]) -> Iterable[tuple[str, Mapping[str, object] | None, str]]:
    """(slice name, device or None, device name) of one of Tessera's slices."""
    meta = s.get("metadata")
    slice_name = excerpt(meta.get("name") if isinstance(meta, Mapping) else None, bare=True)
    spec = s.get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    for i, d in enumerate(devices if isinstance(devices, list) else ()):
        ok = isinstance(d, Mapping)
        yield slice_name, d if ok else None, excerpt(d.get("name") if ok else f"#{i}", bare=True)


def _ours(s: object) -> bool:
    spec = s.get("spec") if isinstance(s, Mapping) else None
    return isinstance(spec, Mapping) and spec.get("driver") == DRIVER_NAME


def from_slices(slices: Iterable[Mapping[str, object]]) -> Catalog:
    """The products Tessera's ResourceSlices publish: a whole GPU's or a shared device's memory is the
    product's, a MIG device's memory is its profile's. Slices of other drivers are ignored; a device that
    cannot be used is skipped (`Catalog.skipped`), the rest of its slice and every other slice still count."""
    memory: dict[str, int] = {}
    mig: dict[str, set[MigOption]] = {}
    skipped: list[Skipped] = []
    for s in slices:
        if not _ours(s):
            continue
        for slice_name, d, device_name in _devices(s):
            try:
                if d is None:
                    raise _UnusableError("spec.devices[]", "not an object")
                entry = _read_device(d)
            except _UnusableError as e:
                skipped.append(Skipped(slice_name, device_name, e.field, e.why))
                continue
            if entry is None:
                continue
            if entry.mig is not None:
                mig.setdefault(entry.product, set()).add(entry.mig)
            else:
                memory[entry.product] = max(memory.get(entry.product, 0), entry.memory_mib)
    names = sorted(set(memory) | set(mig))
    # A GPU published only as MIG devices (Ampere in MIG mode) has its product's memory in Tessera's tables.
    known = {p.name: p.memory_mib for p in known_products().products}
    return Catalog(
        tuple(
            Product(name, memory.get(name) or known.get(name, 0), tuple(sorted(mig.get(name, ()))))
            for name in names
        ),
        tuple(skipped),
    )
