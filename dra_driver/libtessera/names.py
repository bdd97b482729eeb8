"""The names libtessera.so finds its claims by: the files, where a container sees them, and the environment
the claim's CDI spec sets (pure). interceptor/src/config.c reads the same names.

On the host, `<claims root>/<uid>/` is the daemon's (the limits file, mounted read-only over the container's
`limits`); only its SHARED_DIR_NAME subdirectory (the region) is mounted read-write as the claim directory.
The node's read-only view of each shared GPU (time-division schedule, priority holds) has a directory per GPU.
"""

from __future__ import annotations

from dra_driver.vocabulary.names import ClaimUID, GpuUUID

LIMITS_FILE_NAME = "limits"
REGION_FILE_NAME = "region"
SHARED_DIR_NAME = "shared"
VIEW_FILE_NAME = "view"

# Where the library and the claim's files appear inside a container.
CONTAINER_LIBRARY_PATH = "/usr/local/tessera/lib/libtessera.so"
CONTAINER_CLAIMS_ROOT = "/var/run/tessera/claims"
CONTAINER_GPUS_ROOT = "/var/run/tessera/gpus"

LD_PRELOAD_ENV = "LD_PRELOAD"
CLAIM_DIRS_ENV = "TESSERA_CLAIM_DIRS"
CLAIM_DIR_ENV_PREFIX = "TESSERA_CLAIM_DIR_"


class HamiEnv:
    """HAMi-core's variables, honoured so either library can be injected."""

    MEMORY_LIMIT_PREFIX = "CUDA_DEVICE_MEMORY_LIMIT_"  # + index within the claim; value "<MiB>m"
    SM_LIMIT_PREFIX = "CUDA_DEVICE_SM_LIMIT_"  # + index within the claim; value 0-100
    SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
    CORE_POLICY = "GPU_CORE_UTILIZATION_POLICY"
    TASK_PRIORITY = "CUDA_TASK_PRIORITY"
    LOG_LEVEL = "LIBCUDA_LOG_LEVEL"


def claim_dir_env(claim_uid: ClaimUID) -> str:
    """One variable per claim, so two claims in one container never overwrite each other's."""
    return f"{CLAIM_DIR_ENV_PREFIX}{claim_uid.replace('-', '_')}"


def container_claim_dir(claim_uid: ClaimUID) -> str:
    return f"{CONTAINER_CLAIMS_ROOT}/{claim_uid}"


def container_gpu_dir(gpu_uuid: GpuUUID) -> str:
    """Where a GPU's view directory appears in a container (the UUID is NVML's, a safe path component)."""
    return f"{CONTAINER_GPUS_ROOT}/{gpu_uuid}"
