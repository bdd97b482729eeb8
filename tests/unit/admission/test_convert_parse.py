"""Reading HAMi's and Volcano's names: values, defaults, and refusals that name the field."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.convert import names
from admission.convert.parse import parse_container, parse_env_config, parse_integer, parse_selection
from dra_driver.vocabulary.errors import ConversionError
from dra_driver.vocabulary.inventory import MAX_GPUS
from dra_driver.vocabulary.quantity import parse_quantity

PATH = "spec.containers[0]"


def container(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    return {"name": "c", "resources": resources}


def test_hami_values_are_read_per_gpu() -> None:
    ask = parse_container(
        container({"nvidia.com/gpu": 2, "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": 30, "cpu": "1"}),
        PATH,
    )
    assert ask is not None
    assert (ask.dialect, ask.count, ask.memory_mib, ask.cores) == (names.HAMI, 2, 3000, 30)
    assert ask.memory_percent is None and ask.priority is None
    assert dict(ask.written) == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem": "3000",
        "nvidia.com/gpucores": "30",
    }


def test_volcano_names_mean_the_same() -> None:
    ask = parse_container(
        container({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024, "volcano.sh/vgpu-cores": 50}),
        PATH,
    )
    assert ask is not None
    assert (ask.dialect, ask.count, ask.memory_mib, ask.cores) == (names.VOLCANO, 1, 1024, 50)


def test_a_container_without_foreign_names_is_not_asked_about() -> None:
    assert parse_container(container({"cpu": "1", "gpu.tessera.dev/vgpu": 1}), PATH) is None
    assert parse_container({"name": "c"}, PATH) is None


def test_memory_alone_means_one_gpu_and_requests_count_too() -> None:
    ask = parse_container(container({}, {"nvidia.com/gpumem": 2000}), PATH)
    assert ask is not None and ask.count == 1 and ask.memory_mib == 2000


@pytest.mark.parametrize(
    ("limits", "field", "fix"),
    [
        ({"nvidia.com/gpu": 0}, "limits[nvidia.com/gpu]: 0", "ask for 1 or more"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 120}, "limits[nvidia.com/gpucores]: 120", "use 1-100"),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpumem-percentage": 50},
            "limits[nvidia.com/gpumem]",
            "not both",
        ),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 101}, "gpumem-percentage]: 101", "use 1-100"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 0}, "limits[nvidia.com/gpumem]: 0 MiB", "1 MiB or more"),
        ({"nvidia.com/gpu": 1, "nvidia.com/priority": 2}, "limits[nvidia.com/priority]: 2", "0 (high) or 1"),
        ({"nvidia.com/gpu": "1.5"}, "limits[nvidia.com/gpu]: '1.5'", "whole number"),
        (
            {"nvidia.com/gpu": 1, "volcano.sh/vgpu-memory": 10},
            "resources.limits: mixes",
            "one project's names",
        ),
    ],
)
def test_bad_values_are_refused_with_field_and_fix(limits: dict[str, Any], field: str, fix: str) -> None:
    with pytest.raises(ConversionError) as e:
        parse_container(container(limits), PATH)
    assert f"{PATH}" in str(e.value) and field in str(e.value) and fix in str(e.value)


def test_annotations_are_lists_and_modes() -> None:
    s = parse_selection(
        {
            names.USE_GPU_TYPE: "A100, V100",
            names.NOUSE_GPU_UUID: "GPU-1,GPU-2",
            "nvidia.com/vgpu-mode": "mig",
            names.GPU_SCHEDULER_POLICY: "binpack",
            "unrelated": "x",
        }
    )
    assert s.use_types == ("A100", "V100") and s.nouse_uuids == ("GPU-1", "GPU-2")
    assert s.mode(names.HAMI) == "mig" and s.mode(names.VOLCANO) == "hami-core"
    assert s.gpu_policy == "binpack" and "unrelated" not in dict(s.written)


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({"nvidia.com/vgpu-mode": "vgpu"}, "metadata.annotations[nvidia.com/vgpu-mode]"),
        ({"volcano.sh/vgpu-mode": "mps"}, "metadata.annotations[volcano.sh/vgpu-mode]"),
        ({names.USE_GPU_TYPE: 'A100") || true || ("'}, "metadata.annotations[nvidia.com/use-gputype]"),
        ({names.NOUSE_GPU_UUID: " , "}, "metadata.annotations[nvidia.com/nouse-gpuuuid]"),
        ({names.NODE_SCHEDULER_POLICY: "random"}, "metadata.annotations[hami.io/node-scheduler-policy]"),
    ],
)
def test_bad_annotations_are_refused(annotations: dict[str, str], field: str) -> None:
    with pytest.raises(ConversionError, match=rf"^{field.replace('[', '.').replace(']', '.')}"):
        parse_selection(annotations)


def test_env_becomes_vgpu_config_and_disable_is_refused() -> None:
    c = {
        "env": [
            {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"},
            {"name": "LIBCUDA_LOG_LEVEL", "value": "3"},
        ]
    }
    assert parse_env_config(c, PATH) == {"smLimitPolicy": "force", "logLevel": 3}
    with pytest.raises(ConversionError, match=r"spec.containers\[0\].env\[0\].value.*more cores"):
        parse_env_config({"env": [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "disable"}]}, PATH)


@given(st.integers(min_value=0, max_value=10**12 - 1))
def test_every_whole_number_reads_back(n: int) -> None:
    assert parse_integer(n, "f", meaning="x") == n
    assert parse_integer(str(n), "f", meaning="x") == n


@given(st.one_of(st.text(max_size=30), st.floats(), st.booleans(), st.none(), st.lists(st.integers())))
def test_any_value_parses_or_is_refused_naming_the_field(raw: object) -> None:
    try:
        value = parse_integer(raw, "spec.x", meaning="count")
    except ConversionError as e:
        assert str(e).startswith("spec.x: ")
    else:
        assert isinstance(value, int) and value >= 0


@given(st.dictionaries(st.sampled_from(names.all_resource_names()), st.integers(min_value=0, max_value=300)))
def test_containers_convert_or_are_refused(limits: dict[str, int]) -> None:
    try:
        ask = parse_container(container(dict(limits)), PATH)
    except ConversionError as e:
        assert str(e).startswith(PATH)
    else:
        assert (ask is None) == (not limits)
        if ask is not None:
            assert ask.count >= 1 and (ask.cores or 0) <= 100


@given(st.text(max_size=40))
def test_annotation_text_never_escapes_a_cel_literal(text: str) -> None:
    try:
        s = parse_selection({names.USE_GPU_TYPE: text, names.NOUSE_GPU_UUID: text})
    except ConversionError as e:
        assert str(e).startswith("metadata.annotations[")
    else:
        for item in s.use_types + s.nouse_uuids:
            assert '"' not in item and "\\" not in item


# ---- strict numbers and the GPU count's bound (issue #34) -----------------------------------------------

FULL_WIDTH_1024 = "\uff11\uff10\uff12\uff14"


@pytest.mark.parametrize(
    "raw",
    [FULL_WIDTH_1024, "1024\n", "1024 ", " 1024", "\u0661\u0660", "1\u00b2", "1e\uff13", "10\r\n", "+1\n"],
)
def test_only_ascii_digits_and_nothing_around_them_are_numbers(raw: str) -> None:
    with pytest.raises(ConversionError, match=r"^spec.x: .* is not a whole number"):
        parse_integer(raw, "spec.x", meaning="memory")


NUMBERISH = st.text(alphabet="0123456789+-.kMGTPEie \n\r\t" + FULL_WIDTH_1024 + "\u0661\u00b2", max_size=8)


@given(st.one_of(st.text(max_size=20), NUMBERISH))
def test_a_number_is_ascii_digits_with_an_optional_suffix(raw: str) -> None:
    try:
        value = parse_integer(raw, "spec.x", meaning="count")
    except ConversionError as e:
        assert str(e).startswith("spec.x: ") and len(str(e)) < 400
    else:
        assert raw.isascii() and raw == raw.strip() and raw.lstrip("+")[:1].isdigit()
        assert value == int(parse_quantity(raw).value)


@pytest.mark.parametrize(
    ("key", "count"),
    [("nvidia.com/gpu", MAX_GPUS + 1), ("volcano.sh/vgpu-number", 10**11), ("nvidia.com/gpu", "1k")],
)
def test_the_gpu_count_is_bounded(key: str, count: int | str) -> None:
    with pytest.raises(ConversionError) as e:
        parse_container(container({key: count}), PATH)
    message = str(e.value)
    assert message.startswith(f"{PATH}.resources.limits[{key}]: ") and f"at most {MAX_GPUS}" in message


def test_the_most_gpus_a_container_can_be_given_is_still_allowed() -> None:
    ask = parse_container(container({"nvidia.com/gpu": MAX_GPUS}), PATH)
    assert ask is not None and ask.count == MAX_GPUS == 16
