"""Real GPU products and their MIG profile tables (from NVIDIA's MIG guide and `nvidia-smi mig -lgip/-lgipp`).

The simulated backend builds its GPUs from these; the NVML backend reads the same facts from the driver and
may use the whole-GPU figures where NVML has no call for them (engine counts). Figures marked *unverified*
come from inference, not from a real `nvidia-smi` output.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import Architecture, MigProfile

MIB = 1024 * 1024

# Placement starts shared by every 8-memory-slice GPU (A100, H100, H200), in the order of
# `_eight_slice_profiles`: 25 placements in all (`nvidia-smi mig -lgipp`).
_STARTS_8: tuple[tuple[int, ...], ...] = (
    (0, 1, 2, 3, 4, 5, 6),
    (0, 1, 2, 3, 4, 5, 6),
    (0, 2, 4, 6),
    (0, 2, 4),
    (0, 4),
    (0,),
    (0,),
)


@dataclass(frozen=True, slots=True)
class GpuProduct:
    """Whole-GPU figures of one product; `key` is what node files use, `product_name` what NVML reports."""

    key: str
    product_name: str
    architecture: Architecture
    cuda_compute_capability: str
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_slice_count: int  # 0 when the product cannot do MIG
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def mig_capable(self) -> bool:
        return self.memory_slice_count > 0

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def profile_by_name(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.profile_id == profile_id), None)


def _profile(
    profile_id: int,
    name: str,
    memory_mib: int,
    multiprocessors: int,
    *,
    size: int,
    engines: str,
    max_instances: int,
    starts: tuple[int, ...],
) -> MigProfile:
    """`engines` is "CE/DEC/ENC/JPEG/OFA" as the facts table writes it."""
    ce, dec, enc, jpeg, ofa = (int(x) for x in engines.split("/"))
    compute = int(name.split("g.", 1)[0])
    return MigProfile(
        profile_id=profile_id,
        name=name,
        memory_mib=memory_mib,
        multiprocessors=multiprocessors,
        compute_slices=compute,
        memory_slices=size,
        copy_engines=ce,
        decoders=dec,
        encoders=enc,
        jpeg_engines=jpeg,
        ofa_engines=ofa,
        max_instances=max_instances,
        placement_starts=starts,
    )


def _eight_slice_profiles(
    names: tuple[str, str, str, str, str, str, str],
    mib: tuple[int, int, int, int, int, int, int],
    sms: tuple[int, int, int, int, int, int, int],
    engines: tuple[str, str, str, str, str, str, str],
) -> tuple[MigProfile, ...]:
    """The seven profiles of an 8-slice GPU, in the order 1g, 1g+me, 1g-double, 2g, 3g, 4g, 7g."""
    ids = (19, 20, 15, 14, 9, 5, 0)
    sizes = (1, 1, 2, 2, 4, 4, 8)
    maxes = (7, 1, 4, 3, 2, 1, 1)
    return tuple(
        _profile(
            ids[i],
            names[i],
            mib[i],
            sms[i],
            size=sizes[i],
            engines=engines[i],
            max_instances=maxes[i],
            starts=_STARTS_8[i],
        )
        for i in range(7)
    )


_A100_ENGINES = ("1/0/0/0/0", "1/1/0/1/1", "1/1/0/0/0", "2/1/0/0/0", "3/2/0/0/0", "4/2/0/0/0", "7/5/0/1/1")
_A100_SMS = (14, 14, 14, 28, 42, 56, 98)
_H100_ENGINES = ("1/1/0/1/0", "1/1/0/1/1", "1/1/0/1/0", "2/2/0/2/0", "3/3/0/3/0", "4/4/0/4/0", "8/7/0/7/1")
_H100_MIB = (9984, 9984, 20096, 20096, 40448, 40448, 81152)
_H100_NAMES = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")

A100_SXM4_40GB = GpuProduct(
    key="A100-SXM4-40GB",
    product_name="NVIDIA A100-SXM4-40GB",
    architecture=Architecture.AMPERE,
    cuda_compute_capability="8.0",
    memory_mib=40960,
    multiprocessors=108,
    copy_engines=7,
    decoders=5,
    encoders=0,
    jpeg_engines=1,
    ofa_engines=1,
    memory_slice_count=8,
    mig_profiles=_eight_slice_profiles(
        ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        (4864, 4864, 9856, 9856, 19968, 19968, 40192),
        _A100_SMS,
        _A100_ENGINES,
    ),
)

A100_SXM4_80GB = GpuProduct(
    key="A100-SXM4-80GB",
    product_name="NVIDIA A100-SXM4-80GB",
    architecture=Architecture.AMPERE,
    cuda_compute_capability="8.0",
    memory_mib=81920,
    multiprocessors=108,
    copy_engines=7,
    decoders=5,
    encoders=0,
    jpeg_engines=1,
    ofa_engines=1,
    memory_slice_count=8,
    mig_profiles=_eight_slice_profiles(
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        (9728, 9728, 19968, 19968, 40192, 40192, 80896),
        _A100_SMS,
        _A100_ENGINES,
    ),
)

H100_80GB_SXM = GpuProduct(
    key="H100-80GB-SXM",
    product_name="NVIDIA H100 80GB HBM3",
    architecture=Architecture.HOPPER,
    cuda_compute_capability="9.0",
    memory_mib=81559,
    multiprocessors=132,
    copy_engines=8,
    decoders=7,
    encoders=0,
    jpeg_engines=7,
    ofa_engines=1,
    memory_slice_count=8,
    mig_profiles=_eight_slice_profiles(_H100_NAMES, _H100_MIB, (16, 16, 26, 32, 60, 64, 132), _H100_ENGINES),
)

H100_80GB_PCIE = GpuProduct(
    key="H100-80GB-PCIE",
    product_name="NVIDIA H100 PCIe",
    architecture=Architecture.HOPPER,
    cuda_compute_capability="9.0",
    memory_mib=81559,
    multiprocessors=114,
    copy_engines=8,
    decoders=7,
    encoders=0,
    jpeg_engines=7,
    ofa_engines=1,
    memory_slice_count=8,
    mig_profiles=_eight_slice_profiles(_H100_NAMES, _H100_MIB, (14, 14, 14, 30, 46, 62, 114), _H100_ENGINES),
)

H200_141GB = GpuProduct(
    key="H200-141GB",
    product_name="NVIDIA H200",
    architecture=Architecture.HOPPER,
    cuda_compute_capability="9.0",
    memory_mib=143771,
    multiprocessors=132,
    copy_engines=8,
    decoders=7,
    encoders=0,
    jpeg_engines=7,
    ofa_engines=1,
    memory_slice_count=8,
    # 7g.141gb memory and SMs and the placements (assumed as H100) are unverified.
    mig_profiles=_eight_slice_profiles(
        ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
        (16384, 16384, 33024, 33024, 71168, 71168, 143360),
        (16, 16, 26, 32, 60, 64, 132),
        _H100_ENGINES,
    ),
)

# A30: 4 memory slices; profile IDs, MiB and engines are inferred (unverified).
A30_24GB = GpuProduct(
    key="A30-24GB",
    product_name="NVIDIA A30",
    architecture=Architecture.AMPERE,
    cuda_compute_capability="8.0",
    memory_mib=24576,
    multiprocessors=56,
    copy_engines=4,
    decoders=4,
    encoders=0,
    jpeg_engines=1,
    ofa_engines=1,
    memory_slice_count=4,
    mig_profiles=(
        _profile(14, "1g.6gb", 5952, 14, size=1, engines="1/1/0/0/0", max_instances=4, starts=(0, 1, 2, 3)),
        _profile(
            21, "1g.6gb+me", 5952, 14, size=1, engines="1/1/0/1/1", max_instances=1, starts=(0, 1, 2, 3)
        ),
        _profile(5, "2g.12gb", 11968, 28, size=2, engines="2/2/0/0/0", max_instances=2, starts=(0, 2)),
        _profile(6, "2g.12gb+me", 11968, 28, size=2, engines="2/2/0/1/1", max_instances=1, starts=(0, 2)),
        _profile(0, "4g.24gb", 24000, 56, size=4, engines="4/4/0/1/1", max_instances=1, starts=(0,)),
    ),
)

L4 = GpuProduct(
    key="L4",
    product_name="NVIDIA L4",
    architecture=Architecture.ADA,
    cuda_compute_capability="8.9",
    memory_mib=23034,
    multiprocessors=58,
    copy_engines=2,
    decoders=4,
    encoders=2,
    jpeg_engines=4,
    ofa_engines=1,
    memory_slice_count=0,
)

PRODUCTS: tuple[GpuProduct, ...] = (
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    H100_80GB_SXM,
    H100_80GB_PCIE,
    H200_141GB,
    A30_24GB,
    L4,
)


def profile_order(p: MigProfile) -> tuple[int, int, str]:
    """The order of every table above, and so of the published MIG devices, whatever order a backend
    finds the profiles in: compute slices, memory slices, name (1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb ...)."""
    return (p.compute_slices, p.memory_slices, p.name)


def _fold(name: str) -> str:
    return name.strip().casefold()


_BY_NAME: dict[str, GpuProduct] = {}
for _p in PRODUCTS:
    _BY_NAME[_fold(_p.key)] = _p
    _BY_NAME[_fold(_p.product_name)] = _p


def find_product(name: str) -> GpuProduct | None:
    """Look a product up by node-file key (`H100-80GB-SXM`) or NVML name (`NVIDIA H100 80GB HBM3`)."""
    return _BY_NAME.get(_fold(name))


def product(name: str) -> GpuProduct:
    found = find_product(name)
    if found is None:
        known = ", ".join(p.key for p in PRODUCTS)
        raise ConfigError(f"unknown GPU product {name!r}: use one of {known} (or the NVML product name)")
    return found
