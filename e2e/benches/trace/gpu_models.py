"""The trace's GPU models as Tessera products (pure data), and the share of one that a pod's thousandths
become.

The published models get their real figures (memory as NVML reports it). The trace does not disclose G1,
G2 and G3; they get memory sizes of their class, none of them MIG-capable (docs/performance.md, "A
production trace"): G1 24 GiB, G2 32 GiB, G3 80 GiB."""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.core.profiles import GpuProduct
from dra_driver.vocabulary.inventory import Architecture
from e2e.benches.trace.records import WHOLE_MILLI, TraceError


def _product(*, key: str, name: str, arch: Architecture, cc: str, mib: int, sms: int) -> GpuProduct:
    return GpuProduct(
        key=key,
        product_name=name,
        architecture=arch,
        cuda_compute_capability=cc,
        memory_mib=mib,
        multiprocessors=sms,
        copy_engines=2,
        decoders=1,
        encoders=1,
        jpeg_engines=0,
        ofa_engines=0,
        memory_slice_count=0,
    )


MODELS: dict[str, GpuProduct] = {
    p.key: p
    for p in (
        _product(
            key="P100", name="Tesla P100-PCIE-16GB", arch=Architecture.PASCAL, cc="6.0", mib=16280, sms=56
        ),
        _product(key="T4", name="Tesla T4", arch=Architecture.TURING, cc="7.5", mib=15360, sms=40),
        _product(
            key="V100M16", name="Tesla V100-SXM2-16GB", arch=Architecture.VOLTA, cc="7.0", mib=16160, sms=80
        ),
        _product(
            key="V100M32", name="Tesla V100-SXM2-32GB", arch=Architecture.VOLTA, cc="7.0", mib=32510, sms=80
        ),
        _product(key="A10", name="NVIDIA A10", arch=Architecture.AMPERE, cc="8.6", mib=23028, sms=72),
        _product(key="G1", name="Alibaba G1 24GB", arch=Architecture.AMPERE, cc="8.6", mib=24576, sms=84),
        _product(key="G2", name="Alibaba G2 32GB", arch=Architecture.AMPERE, cc="8.0", mib=32768, sms=108),
        _product(key="G3", name="Alibaba G3 80GB", arch=Architecture.AMPERE, cc="8.0", mib=81920, sms=108),
    )
}


def model(key: str) -> GpuProduct:
    found = MODELS.get(key)
    if found is None:
        raise TraceError(f"unknown GPU model {key!r}: the bench knows {', '.join(MODELS)}")
    return found


@dataclass(frozen=True, slots=True)
class Share:
    """A vgpu request for `milli` thousandths of one GPU of `product`."""

    memory_mib: int
    cores: int


def share_of(product: GpuProduct, milli: int) -> Share:
    """Memory rounded down to the MiB: shares of at most 1000 milli in all then always fit one GPU, and
    shares of more never do (a GPU of M MiB, with M >= 10,000, loses less than 1 milli to rounding
    over its at most 10 shares). Cores rounded down to the percent, so that they never bind before memory."""
    if not 0 < milli < WHOLE_MILLI:
        raise TraceError(f"a share is 1..999 thousandths of a GPU, not {milli}")
    return Share(
        memory_mib=max(1, milli * product.memory_mib // WHOLE_MILLI), cores=milli * 100 // WHOLE_MILLI
    )
