"""Tessera's one error hierarchy. Library errors are translated at the edges with `raise ... from e`.

Each class names the `reason` a claim that fails with it counts under in `tessera_claim_errors_total`
(docs/metrics.md): a small, fixed set, so a label never carries a message. A subclass inherits its parent's.
"""

from __future__ import annotations

from typing import ClassVar

# Every `reason` a claim error can carry; `internal` is any exception that is not a TesseraError (a bug).
CLAIM_ERROR_REASONS = (
    "checkpoint",
    "claim_not_found",
    "claim_replaced",
    "mig",
    "claim_directory",
    "cdi",
    "internal",
    "invalid_request",
    "not_allocated",
    "other",
)


class TesseraError(Exception):
    """Base of every error Tessera raises on purpose."""

    reason: ClassVar[str] = "other"


class InvalidNameError(TesseraError):
    """A name (device, profile, CDI) does not parse."""

    reason = "invalid_request"  # a name the kubelet or the allocation gave


class ConfigError(TesseraError):
    """User input (opaque config, node file, settings) is invalid; the message names the field and the fix."""

    reason = "invalid_request"  # for a claim: its opaque config


class ConversionError(ConfigError):
    """A pod's HAMi or Volcano GPU request cannot be turned into a claim (admission/convert); the message
    names the field (`spec.containers[0].resources.limits[nvidia.com/gpucores]`) and the fix."""


class InventoryError(TesseraError):
    """The GPU backend failed or reports something Tessera cannot use."""


class MigError(InventoryError):
    """A MIG operation failed (placement taken, mode cannot change, instance missing)."""

    reason = "mig"


class PlacementTakenError(MigError):
    """The MIG placement overlaps an existing instance (NVML_ERROR_INSUFFICIENT_RESOURCES)."""


class ClaimError(TesseraError):
    """A claim cannot be prepared or unprepared; reported per claim, never fatal to the daemon."""


class ClaimNotFoundError(ClaimError):
    """The ResourceClaim does not exist in the API server."""

    reason = "claim_not_found"


class ClaimReplacedError(ClaimError):
    """The ResourceClaim of that namespace and name has another UID than the kubelet asked for: it was deleted
    and re-created."""

    reason = "claim_replaced"


class NotAllocatedError(ClaimError):
    """The ResourceClaim has no allocation (the scheduler has not allocated it, or it was deallocated)."""

    reason = "not_allocated"


class StorageError(TesseraError):
    """Writing or reading Tessera's files failed (disk full, permissions, corrupt file)."""


class CheckpointError(StorageError):
    """The checkpoint cannot be read or saved."""

    reason = "checkpoint"


class ClaimDirectoryError(StorageError):
    """A claim's directory (its limits file, its shared directory) cannot be written or removed."""

    reason = "claim_directory"


class CdiSpecError(StorageError):
    """A claim's CDI spec cannot be written, read or removed."""

    reason = "cdi"


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
