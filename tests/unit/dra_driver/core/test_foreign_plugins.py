"""Which Node resources mean another GPU device plugin hands out this node's GPUs."""

from dra_driver.core.foreign_plugins import SPLIT_FLAG, foreign_gpu_resources, refusal_message


def test_nvidia_hami_and_volcano_resources_with_a_count_are_found() -> None:
    capacity = {
        "cpu": "64",
        "nvidia.com/gpu": "8",
        "nvidia.com/mig-1g.10gb": "7",
        "volcano.sh/vgpu-number": "80",
        "nvidia.com/gpumem": "0",
        "gpu.tessera.dev/vgpu": "8",
    }
    assert foreign_gpu_resources(capacity) == (
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "volcano.sh/vgpu-number",
    )


def test_zero_or_garbage_is_no_plugin() -> None:
    assert foreign_gpu_resources({"nvidia.com/gpu": "0", "volcano.sh/vgpu-number": "lots"}) == ()
    assert foreign_gpu_resources({}) == ()


def test_the_message_names_the_resource_the_guide_and_the_flag() -> None:
    message = refusal_message("n1", ("nvidia.com/gpu",))
    assert "n1 advertises nvidia.com/gpu" in message and SPLIT_FLAG in message
    assert "docs/migration-from-hami.md" in message
