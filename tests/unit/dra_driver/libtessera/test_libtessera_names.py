from __future__ import annotations

from dra_driver.libtessera.names import (
    CLAIM_DIR_ENV_PREFIX,
    claim_dir_env,
    container_claim_dir,
    container_gpu_dir,
)
from dra_driver.vocabulary.names import ClaimUID, GpuUUID


def test_each_claim_has_its_own_variable_a_shell_can_name() -> None:
    a, b = ClaimUID("0b1c2d3e-aaaa-0001"), ClaimUID("0b1c2d3e-aaaa-0002")
    assert claim_dir_env(a) == f"{CLAIM_DIR_ENV_PREFIX}0b1c2d3e_aaaa_0001" != claim_dir_env(b)
    assert claim_dir_env(a).isidentifier()


def test_where_a_container_sees_its_claim_and_its_gpus() -> None:
    assert container_claim_dir(ClaimUID("u1")) == "/var/run/tessera/claims/u1"
    assert container_gpu_dir(GpuUUID("GPU-1")) == "/var/run/tessera/gpus/GPU-1"
