"""One container's GPU request → the ResourceClaimTemplate spec Tessera allocates it with (pure).

HAMi's semantics, spelled in DRA:
- `count` GPUs are `count` devices of one request on `count` distinct GPUs: a `distinctAttribute` constraint
  on the GPU's UUID (`parentUUID` for MIG devices, whose own UUID exists only once created).
- Memory in MiB and cores in % are the shared device's `capacity.requests`; a share that names no memory gets
  the whole memory (the device's requestPolicy default, as HAMi's `defaultMem: 0`), cores 0 no SM limit.
- `gpumem-percentage` < 100 and dynamic MIG depend on the product, so they become one `firstAvailable`
  alternative per product the catalog offers.
- `gpumem-percentage: 100` with `gpucores: 100` (or cores 100 and no memory) is HAMi's exclusive card: a
  whole GPU (`gpu.tessera.dev`), which no other claim can share and which runs without the interception
  library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from admission.convert import names
from admission.convert.catalog import Catalog, MigOption, Product
from admission.convert.names import Quantity
from admission.convert.parse import GpuAsk, Selection
from dra_driver.vocabulary.cel_literal import cel_list, cel_string
from dra_driver.vocabulary.errors import ConversionError
from dra_driver.vocabulary.names import (
    ATTRIBUTE_DOMAIN,
    CONFIG_API_VERSION,
    DRIVER_NAME,
    Attr,
    Cap,
    Family,
    device_class_name,
    qualified,
)

MAX_SUBREQUESTS = 8


@dataclass(frozen=True, slots=True)
class Options:
    """What the conversion cannot learn from the pod: the products offered, and the DeviceClass (if an
    administrator made one) for HAMi's high-priority tasks, which a claim cannot ask for by itself."""

    catalog: Catalog
    high_priority_class: str | None = None
    # schedulers whose name a converted pod loses (Volcano's, where Volcano does not run): the default
    # scheduler allocates claims
    replace_schedulers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Converted:
    """A container's claim: the template's `spec`, what the claim gets in words, and what was not kept."""

    family: Family
    spec: dict[str, object]
    summary: str
    notes: tuple[str, ...] = field(default=())


def _attr(name: str) -> str:
    return f'device.attributes["{ATTRIBUTE_DOMAIN}"].{name}'


def selectors(selection: Selection, *, mig: bool) -> list[dict[str, object]]:
    """CEL selectors for HAMi's use/nouse annotations; product names match case-insensitively, as HAMi's."""
    uuid = _attr(Attr.PARENT_UUID if mig else Attr.UUID)
    product = _attr(Attr.PRODUCT_NAME) + ".upperAscii()"
    out = []
    if selection.use_types:
        out.append(f"{cel_list([t.upper() for t in selection.use_types])}.exists(t, {product}.contains(t))")
    if selection.nouse_types:
        out.append(
            f"!{cel_list([t.upper() for t in selection.nouse_types])}.exists(t, {product}.contains(t))"
        )
    if selection.use_uuids:
        out.append(f"{uuid} in {cel_list(selection.use_uuids)}")
    if selection.nouse_uuids:
        out.append(f"!({uuid} in {cel_list(selection.nouse_uuids)})")
    return [{"cel": {"expression": e}} for e in out]


def _labels(product_names: Sequence[str]) -> list[str]:
    """Product names as distinct DNS labels for subrequests' names (`NVIDIA H100 PCIe` → `nvidia-h100-pcie`);
    names that spell the same label get `-2`, `-3`, … (a node may publish any product name)."""
    out: list[str] = []
    for name in product_names:
        words = "".join(c if c.isascii() and c.isalnum() else "-" for c in name.lower()).split("-")
        base = "-".join(w for w in words if w)[:63].rstrip("-") or "gpu"
        label, n = base, 1
        while label in out:
            n += 1
            label = f"{base[: 62 - len(str(n))].rstrip('-')}-{n}"
        out.append(label)
    return out


def _product_is(products: Sequence[Product]) -> str:
    return f"{_attr(Attr.PRODUCT_NAME)} in {cel_list([p.name for p in products])}"


def _request(
    class_name: str, count: int, extra: Sequence[str], base: list[dict[str, object]]
) -> dict[str, object]:
    body: dict[str, object] = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    chosen = base + [{"cel": {"expression": e}} for e in extra]
    if chosen:
        body["selectors"] = chosen
    return body


def _whole_memory(ask: GpuAsk) -> bool:
    return ask.memory_mib is None and ask.memory_percent in (None, 100)


def _is_exclusive(ask: GpuAsk) -> bool:
    return ask.cores == 100 and _whole_memory(ask)


def _check_memory(ask: GpuAsk, catalog: Catalog) -> None:
    if ask.memory_mib is not None and ask.memory_mib > catalog.largest_memory_mib:
        raise ConversionError(
            f"{ask.field(Quantity.MEMORY)}: {ask.memory_mib} MiB is more than any GPU this cluster "
            f"offers has (largest: {catalog.largest_memory_mib} MiB; offered: {catalog.describe()}); "
            "ask for at most that"
        )


def _mig(ask: GpuAsk, selection: Selection, catalog: Catalog) -> dict[str, object]:
    if ask.cores is not None:
        raise ConversionError(
            f"{ask.field(Quantity.CORES)}: a MIG instance's compute is fixed by its profile "
            f"({ask.dialect.mode_annotation}: mig); remove the cores, or use mode hami-core for an SM share"
        )
    groups: dict[str, tuple[MigOption, list[Product]]] = {}  # by profile name, smallest option first
    for p in catalog.products:
        if not p.mig:
            continue
        if ask.memory_mib is not None:
            option = p.smallest_profile(ask.memory_mib)
        else:
            need = p.memory_mib * (ask.memory_percent or 100) // 100
            option = p.smallest_profile(need) or max(p.mig)  # the whole GPU as MIG: its largest profile
        if option is not None:
            smallest, products = groups.get(option.name, (option, []))
            groups[option.name] = (min(smallest, option), [*products, p])
    if not groups:
        largest = max((m for p in catalog.products for m in p.mig), default=None)
        offered = (
            f"the largest is {largest.name} ({largest.memory_mib} MiB)" if largest else "none is offered"
        )
        raise ConversionError(
            f"{ask.field(Quantity.MEMORY)}: no MIG profile holds {ask.memory_mib} MiB ({offered}); "
            f"ask for less memory, or leave out {ask.dialect.mode_annotation}: mig for a software slice"
        )
    base = selectors(selection, mig=True)
    klass = device_class_name(Family("mig"))
    alternatives = [
        (
            o.name.replace(".", "-").replace("+", "-"),
            _request(
                klass, ask.count, [f"{_attr(Attr.PROFILE)} == {cel_string(o.name)}", _product_is(ps)], base
            ),
        )
        for o, ps in sorted(groups.values(), key=lambda g: g[0])
    ]
    return _one_or_alternatives(alternatives)


def _one_or_alternatives(alternatives: Sequence[tuple[str, dict[str, object]]]) -> dict[str, object]:
    if len(alternatives) == 1:
        return {"name": names.REQUEST_NAME, "exactly": alternatives[0][1]}
    return {
        "name": names.REQUEST_NAME,
        "firstAvailable": [{"name": n, **body} for n, body in alternatives[:MAX_SUBREQUESTS]],
    }


def _shared(ask: GpuAsk, family: Family, selection: Selection, options: Options) -> dict[str, object]:
    klass = device_class_name(family)
    if ask.priority == 0:
        if options.high_priority_class is None:
            raise ConversionError(
                f"{ask.field(Quantity.PRIORITY)}: 0 (high priority) holds the GPU's other claims "
                "back, which only an administrator's DeviceClass may do; remove it, "
                "or ask your administrator to start the "
                "webhook with --high-priority-class"
            )
        klass = options.high_priority_class
    capacity: dict[str, str] = {}
    if ask.cores:
        capacity[Cap.CORES] = str(ask.cores)
    base = selectors(selection, mig=False)
    if ask.memory_mib is not None:
        capacity[Cap.MEMORY] = f"{ask.memory_mib}Mi"
    if ask.memory_percent is None or ask.memory_percent == 100:
        body = _request(klass, ask.count, [], base)
        if capacity:
            body["capacity"] = {"requests": capacity}
        return {"name": names.REQUEST_NAME, "exactly": body}
    alternatives = []
    products = options.catalog.products
    for p, label in zip(products, _labels([p.name for p in products]), strict=True):
        mib = max(1, p.memory_mib * ask.memory_percent // 100)
        body = _request(klass, ask.count, [f"{_attr(Attr.PRODUCT_NAME)} == {cel_string(p.name)}"], base)
        body["capacity"] = {"requests": {**capacity, Cap.MEMORY: f"{mib}Mi"}}
        alternatives.append((label, body))
    if not alternatives:
        raise ConversionError(
            f"{ask.field(Quantity.MEMORY_PERCENT)}: the cluster offers no GPU to take it of"
        )
    return _one_or_alternatives(alternatives)


def _family(ask: GpuAsk, selection: Selection) -> Family:
    mode = selection.mode(ask.dialect)
    if mode == "mig":
        return Family("mig")
    if mode == "mps":
        return Family("mps")
    return Family("gpu") if _is_exclusive(ask) else Family("vgpu")


def convert_ask(
    ask: GpuAsk, selection: Selection, options: Options, config: dict[str, object] | None = None
) -> Converted:
    """The claim spec for one container; `config`: the VgpuConfig parameters from its environment."""
    _check_memory(ask, options.catalog)
    family = _family(ask, selection)
    notes: list[str] = []
    if family == "mig":
        request = _mig(ask, selection, options.catalog)
    elif family == "gpu":
        request = {
            "name": names.REQUEST_NAME,
            "exactly": _request(device_class_name(family), ask.count, [], selectors(selection, mig=False)),
        }
    else:
        request = _shared(ask, family, selection, options)
    if ask.priority is not None and family in ("gpu", "mig"):
        notes.append(f"{ask.dialect.resource(Quantity.PRIORITY)} ignored: a {family} device is not shared")
    devices: dict[str, object] = {"requests": [request]}
    if ask.count > 1:
        distinct = qualified(Attr.PARENT_UUID if family == "mig" else Attr.UUID)
        devices["constraints"] = [{"requests": [names.REQUEST_NAME], "distinctAttribute": distinct}]
    if config and family == "vgpu":
        parameters = {"apiVersion": CONFIG_API_VERSION, "kind": "VgpuConfig", **config}
        devices["config"] = [
            {"requests": [names.REQUEST_NAME], "opaque": {"driver": DRIVER_NAME, "parameters": parameters}}
        ]
    return Converted(
        family=family, spec={"spec": {"devices": devices}}, summary=_summary(ask, family), notes=tuple(notes)
    )


def _summary(ask: GpuAsk, family: Family) -> str:
    each = []
    if family in ("vgpu", "mps", "mig"):
        if ask.memory_mib is not None:
            each.append(f"{ask.memory_mib} MiB")
        elif ask.memory_percent not in (None, 100):
            each.append(f"{ask.memory_percent}% of the memory")
        else:
            each.append("all the memory")
    if family in ("vgpu", "mps"):
        each.append(f"{ask.cores}% of the SMs" if ask.cores else "no SM limit")
    what = {"gpu": "whole GPU", "vgpu": "vgpu slice", "mps": "MPS share", "mig": "MIG instance"}[family]
    plural = "s on distinct GPUs" if ask.count > 1 else ""
    detail = f" ({', '.join(each)}{' each' if ask.count > 1 else ''})" if each else ""
    return f"{ask.count} {what}{plural}{detail} [{device_class_name(family)}]"
