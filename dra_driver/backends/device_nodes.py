"""The device nodes NVML does not name: a character device's major from /proc/devices, and a MIG instance's
capability nodes (`/dev/nvidia-caps/nvidia-cap<minor>`) from the driver's capability files."""

from __future__ import annotations

from pathlib import Path

from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.errors import MigError

PROC_DEVICES = Path("/proc/devices")
CAPS_ROOT = Path("/proc/driver/nvidia/capabilities")


def char_major(name: str, proc_devices: Path = PROC_DEVICES) -> int | None:
    """The major of a character device as the `Character devices:` section of /proc/devices lists it."""
    try:
        lines = proc_devices.read_text().splitlines()
    except OSError:
        return None
    in_chars = False
    for line in lines:
        if line.strip().endswith("devices:"):
            in_chars = line.strip() == "Character devices:"
            continue
        parts = line.split()
        if in_chars and len(parts) == 2 and parts[1] == name and parts[0].isdigit():
            return int(parts[0])
    return None


def cap_minor(access_file: Path) -> int:
    """`DeviceFileMinor: N` from a /proc/driver/nvidia/capabilities/.../access file."""
    try:
        text = access_file.read_text()
    except OSError as e:
        raise MigError(f"cannot read MIG capability file {access_file}: {e.strerror}") from e
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "DeviceFileMinor" and value.strip().isdigit():
            return int(value.strip())
    raise MigError(f"MIG capability file {access_file} has no DeviceFileMinor line")


def mig_cap_nodes(
    *, gpu_minor: int, gi_id: int, ci_id: int, caps_major: int, caps_root: Path = CAPS_ROOT
) -> tuple[DeviceNode, ...]:
    base = caps_root / f"gpu{gpu_minor}" / "mig" / f"gi{gi_id}"
    minors = (cap_minor(base / "access"), cap_minor(base / f"ci{ci_id}" / "access"))
    return tuple(DeviceNode(f"/dev/nvidia-caps/nvidia-cap{m}", caps_major, m) for m in minors)
