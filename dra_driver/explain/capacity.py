"""How much of a device's capacity a request consumes (KEP-5075 request policies)."""

from __future__ import annotations

from fractions import Fraction

from dra_driver.explain.catalog import CapacitySpec, CatalogDevice
from dra_driver.explain.request import Request
from dra_driver.vocabulary.quantity import format_quantity


def _rounded(name: str, want: Fraction, spec: CapacitySpec) -> Fraction | str:
    short = name.rpartition("/")[2]
    if spec.valid_values:
        fits = sorted(v.value for v in spec.valid_values if v.value >= want)
        if not fits:
            allowed = ", ".join(str(v) for v in spec.valid_values)
            return f"{short}: request {format_quantity(want)} is above every valid value ({allowed})"
        return fits[0]
    if spec.range_min is not None:
        low = spec.range_min.value
        value = max(want, low)
        if spec.range_step is not None and spec.range_step.value > 0:
            steps = -((low - value) // spec.range_step.value)  # ceiling
            value = low + steps * spec.range_step.value
        high = spec.range_max.value if spec.range_max is not None else spec.value.value
        if value > high:
            top = format_quantity(high)
            return f"{short}: request {format_quantity(want)} is above the valid range maximum {top}"
        return value
    return want


def consumed_capacity(req: Request, d: CatalogDevice) -> dict[str, Fraction] | str:
    """Capacity taken per qualified name, or why the request is outside the device's policy or size.

    A shared device consumes the (rounded-up) request, the policy default when not requested, else all of it;
    an exclusive device treats capacity requests as minimum sizes and consumes nothing countable.
    """
    # Like kube-scheduler, match request keys to capacity names exactly as the slice spells them.
    by_spelling = {spelled: name for name, spelled in d.capacity_spelling.items()}
    requested: dict[str, Fraction] = {}
    for key, q in (req.capacity or {}).items():
        if key not in by_spelling:
            known = ", ".join(sorted(by_spelling)) or "none"
            return f"device has no capacity named {key!r} (it publishes: {known})"
        requested[by_spelling[key]] = q.value
    out: dict[str, Fraction] = {}
    for name, spec in d.capacity.items():
        short = name.rpartition("/")[2]
        if not d.allow_multiple_allocations:
            if name in requested and requested[name] > spec.value.value:
                asked = format_quantity(requested[name])
                return f"{short}: request {asked} is more than the device's {spec.value}"
            continue
        if name in requested:
            value = _rounded(name, requested[name], spec)
        elif spec.default is not None:
            value = spec.default.value
        else:
            value = spec.value.value
        if isinstance(value, str):
            return value
        if value > spec.value.value:
            return f"{short}: request {format_quantity(value)} is more than the device's {spec.value}"
        out[name] = value
    return out
