"""The Kubernetes releases the e2e control plane and the real node are built for, and what each knows.

Each release's DRA feature gates with their defaults, as its `pkg/features/kube_features.go` declares them
(the last versioned spec of each gate). The plane runs a release with these defaults; a gate goes on only
where a caller says why (`profile("sharing")`: what a user of that release must switch on for Tessera's
sharing families). Which release: `$K8S_VERSION` (`1.35.4` or `v1.35.4`), else the repository's default
(`e2e/cluster/k8s/default-version`, the file build.sh reads too).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dra_driver.core.cluster_features import (
    GATES,
    SHARED_COUNTERS_COUNTED_FROM,
    SHARING_GATES,
    release_version,
)
from e2e.controlplane.errors import ControlPlaneError

MODULES_DIR: Final = Path(__file__).resolve().parent.parent / "cluster" / "k8s"
DEFAULT_VERSION_FILE: Final = MODULES_DIR / "default-version"
GATE_PROFILES: Final = ("default", "sharing")
COUNTER_SLICES_FROM_MINOR: Final = 35


@dataclass(frozen=True, slots=True)
class Release:
    version: str  # "v1.37.2"
    defaults: Mapping[str, bool]  # every DRA-related gate the release knows → its default

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    def knows(self, gate: str) -> bool:
        return gate in self.defaults

    def mixes_families(self) -> bool:
        """Whether its kube-scheduler keeps a shared family apart from the others on one node
        (`dra_driver.core.cluster_features`): Tessera publishes shared families beside others only there."""
        return (release_version(self.version) or (0, 0, 0)) >= SHARED_COUNTERS_COUNTED_FROM

    def accepts_counter_slices(self) -> bool:
        """Whether its API takes counter sets in slices of their own (Tessera's layout): from 1.35 on; 1.34's
        alpha API wants them beside the devices, so Tessera publishes whole GPUs only there."""
        return self.minor >= COUNTER_SLICES_FROM_MINOR

    def suite(self) -> tuple[str, ...]:
        """What `make test-k8s` runs on this release: every e2e cluster test and simulated-node scenario, or,
        where only whole GPUs can be published, the degraded path."""
        if self.accepts_counter_slices():
            return ("e2e/scenarios",)
        return (
            "e2e/scenarios/own_plane/test_publisher_degraded.py",
            "e2e/scenarios/own_plane/test_release_without_sharing.py",
        )

    def serves_sharing(self) -> bool:
        """Whether shared counters and consumable capacity are on with this release's default gates."""
        return all(self.defaults.get(g, False) for g in SHARING_GATES)

    def profile(self, name: str) -> dict[str, bool]:
        """The gates a plane of this release is started with: `default` sets none; `sharing` switches on
        every gate Tessera uses (`dra_driver.core.cluster_features.GATES`) that this release has but does not
        enable."""
        if name == "default":
            return {}
        if name == "sharing":
            return {g.name: True for g in GATES if self.knows(g.name) and not self.defaults[g.name]}
        raise ControlPlaneError(f"gate profile {name!r} is unknown; use one of {', '.join(GATE_PROFILES)}")

    def effective(self, gates: Mapping[str, bool]) -> dict[str, bool]:
        return {**self.defaults, **gates}


def _gates(**on: bool) -> dict[str, bool]:
    return dict(on)


# From each release's pkg/features/kube_features.go: its DRA gates (GA ones too, on) and the two the
# DRA ones depend on.
RELEASES: Final[dict[str, Release]] = {
    r.version: r
    for r in (
        Release(
            "v1.34.12",
            _gates(
                DynamicResourceAllocation=True,
                DRAAdminAccess=True,
                DRAConsumableCapacity=False,
                DRADeviceBindingConditions=False,
                DRADeviceTaints=False,
                DRAExtendedResource=False,
                DRAPartitionableDevices=False,
                DRAPrioritizedList=True,
                DRAResourceClaimDeviceStatus=True,
                DRASchedulerFilterTimeout=True,
                ResourceHealthStatus=False,
            ),
        ),
        Release(
            "v1.35.4",
            _gates(
                DynamicResourceAllocation=True,
                DRAAdminAccess=True,
                DRAConsumableCapacity=False,
                DRADeviceBindingConditions=False,
                DRADeviceTaintRules=False,
                DRADeviceTaints=False,
                DRAExtendedResource=False,
                DRAPartitionableDevices=False,
                DRAPrioritizedList=True,
                DRAResourceClaimDeviceStatus=True,
                DRASchedulerFilterTimeout=True,
                GenericWorkload=False,
                ResourceHealthStatus=False,
            ),
        ),
        Release(
            "v1.36.3",
            _gates(
                DynamicResourceAllocation=True,
                DRAAdminAccess=True,
                DRAPrioritizedList=True,
                DRAConsumableCapacity=True,
                DRADeviceBindingConditions=True,
                DRADeviceTaintRules=False,
                DRADeviceTaints=True,
                DRAExtendedResource=True,
                DRAListTypeAttributes=False,
                DRANodeAllocatableResources=False,
                DRAPartitionableDevices=True,
                DRAResourceClaimDeviceStatus=True,
                DRAResourceClaimGranularStatusAuthorization=True,
                DRAResourcePoolStatus=False,
                DRASchedulerFilterTimeout=True,
                DRAWorkloadResourceClaims=False,
                GenericWorkload=False,
                ResourceHealthStatus=True,
            ),
        ),
        Release(
            "v1.37.2",
            _gates(
                DynamicResourceAllocation=True,
                DRAAdminAccess=True,
                DRADeviceTaintRules=True,
                DRADeviceTaints=True,
                DRAExtendedResource=True,
                DRAPrioritizedList=True,
                DRAResourceClaimDeviceStatus=True,
                DRAConsumableCapacity=True,
                DRADerivedAttributes=False,
                DRADeviceBindingConditions=True,
                DRADeviceCompatibilityGroups=False,
                DRAFractionalCapacityRange=False,  # on only with --min-compatibility-version>=1.37
                DRAListTypeAttributes=False,
                DRANodeAllocatableResources=False,
                DRAOptionalNodeOperations=False,
                DRAPartitionableDevices=True,
                DRAPartitionableDevicesType=False,
                DRAResourceClaimGranularStatusAuthorization=True,
                DRAResourcePoolStatus=False,
                DRASchedulerFilterTimeout=True,
                DRAWorkloadResourceClaims=False,
                GenericWorkload=False,
                ResourceHealthStatus=True,
            ),
        ),
    )
}


def normalize(version: str) -> str:
    v = version.strip()
    return v if v.startswith("v") else f"v{v}"


def default_version() -> str:
    return normalize(DEFAULT_VERSION_FILE.read_text(encoding="utf-8"))


def release(version: str | None = None) -> Release:
    """The release named (or `$K8S_VERSION`, or the default); an error names the releases there are."""
    wanted = normalize(version or os.environ.get("K8S_VERSION") or default_version())
    try:
        return RELEASES[wanted]
    except KeyError:
        raise ControlPlaneError(
            f"Kubernetes {wanted} is not a release the e2e plane knows (K8S_VERSION); known: "
            f"{', '.join(RELEASES)}. A new one needs `bash e2e/cluster/new-version.sh {wanted}` and its "
            "gates in e2e/controlplane/releases.py"
        ) from None


def newest_without_sharing() -> Release:
    """The newest release whose default gates do not serve shared counters (the degraded path runs there)."""
    older = [r for r in RELEASES.values() if not r.serves_sharing()]
    return max(older, key=lambda r: r.minor)


def legacy_release() -> Release:
    """The release the degraded path is tested on: the session's own when its default gates lack sharing,
    else the newest release that lacks it."""
    current = release()
    return current if not current.serves_sharing() else newest_without_sharing()


if __name__ == "__main__":  # for the Makefile: `... releases` (the legacy release) or `... releases suite`
    import sys

    print(" ".join(release().suite()) if sys.argv[1:] == ["suite"] else legacy_release().version)
