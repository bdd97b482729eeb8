"""Reading what NVML calls give back, for the NVML backend's modules: strings (bytes in older bindings) and
the error codes a caller treats as an answer."""

from __future__ import annotations

import pynvml


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def has_code(e: pynvml.NVMLError, *codes: int) -> bool:
    return getattr(e, "value", None) in codes
