"""Tessera's one error hierarchy. Library errors are translated at the edges with `raise ... from e`."""

from __future__ import annotations


class TesseraError(Exception):
    """Base of every error Tessera raises on purpose."""


class InvalidNameError(TesseraError):
    """A name (device, profile, CDI) does not parse."""


class ConfigError(TesseraError):
    """User input (opaque config, node file, settings) is invalid; the message names the field and the fix."""


class InventoryError(TesseraError):
    """The GPU backend failed or reports something Tessera cannot use."""


class MigError(InventoryError):
    """A MIG operation failed (placement taken, mode cannot change, instance missing)."""


class PlacementTakenError(MigError):
    """The MIG placement overlaps an existing instance (NVML_ERROR_INSUFFICIENT_RESOURCES)."""


class ClaimError(TesseraError):
    """A claim cannot be prepared or unprepared; reported per claim, never fatal to the daemon."""


class ClaimNotFoundError(ClaimError):
    """The ResourceClaim does not exist in the API server."""


class StorageError(TesseraError):
    """Writing or reading Tessera's files failed (disk full, permissions, corrupt file)."""


class UnsupportedVersionError(StorageError):
    """A file of ours was written by another (newer) version of Tessera; it is left as it is."""


class MpsError(TesseraError):
    """A GPU's MPS control daemon cannot be started, reached or stopped; the message says where its log is."""


class MpsToolError(MpsError):
    """The MPS control tool itself cannot be run (not installed, not executable)."""


class PublishError(TesseraError):
    """Publishing ResourceSlices failed."""


class SliceRefusedError(PublishError):
    """The API server refused a ResourceSlice as invalid (422): a shape this release does not accept, such as
    counter sets in slices of their own before Kubernetes 1.35."""


class ExclusivityError(ClaimError):
    """A claim's device would share a GPU with another prepared claim's in a way the two exclude each other
    (whole vs vGPU vs MPS vs overlapping MIG placements): the scheduler handed out conflicting devices."""
