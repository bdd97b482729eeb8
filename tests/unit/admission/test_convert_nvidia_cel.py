"""NVIDIA DRA selectors → Tessera's: only the references' domain changes; what has no counterpart is refused,
named; a name inside a string literal or a comment is never taken for a reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.convert.nvidia_cel import ATTRIBUTES, CAPACITIES, MAX_EXPRESSION, rewrite, tokens
from dra_driver.vocabulary.errors import ConversionError

NV = "device.attributes['gpu.nvidia.com']"
TE = "device.attributes['gpu.tessera.dev']"


@pytest.mark.parametrize(
    ("nvidia", "tessera"),
    [
        (f"{NV}.productName.startsWith('NVIDIA H100')", f"{TE}.productName.startsWith('NVIDIA H100')"),
        (f"{NV}.architecture == 'Hopper'", f"{TE}.architecture == 'Hopper'"),
        (f"{NV}.profile == '1g.10gb'", f"{TE}.profile == '1g.10gb'"),
        (
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            "device.capacity['gpu.tessera.dev'].memory.compareTo(quantity('40Gi')) >= 0",
        ),
        (
            'device.attributes["gpu.nvidia.com"].cudaComputeCapability >= semver("9.0.0")',
            f'{TE}.cudaComputeCapability >= semver("9.0.0")',
        ),
        (
            f"{NV}.productName.lowerAscii().matches('^.*a100.*$') &&\n({NV}.index == 0 || {NV}.index == 2)",
            f"{TE}.productName.lowerAscii().matches('^.*a100.*$') &&\n({TE}.index == 0 || {TE}.index == 2)",
        ),
        ("device.driver == 'gpu.nvidia.com'", "device.driver == 'gpu.tessera.dev'"),
        # the standard domain is the same on both drivers' devices
        (
            "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
            "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
        ),
        # a reference's look-alike in a string or a comment stays as written
        (
            f"{NV}.uuid != \"device.attributes['gpu.nvidia.com'].type\" // {NV}.type",
            f"{TE}.uuid != \"device.attributes['gpu.nvidia.com'].type\" // {NV}.type",
        ),
        # raw strings end at the first quote, backslash or not (CEL's lexer)
        (
            f"{NV}.productName.matches(r'H\\d+') && r'\\' != ''",
            f"{TE}.productName.matches(r'H\\d+') && r'\\' != ''",
        ),
    ],
)
def test_references_get_tesseras_domain_and_nothing_else_changes(nvidia: str, tessera: str) -> None:
    assert rewrite(nvidia) == tessera


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        (f"{NV}.addressingMode == 'HMM'", "addressingMode: Tessera does not publish"),
        (f"{NV}.type == 'gpu'", "type: the DeviceClass selects"),
        (f"{NV}.numa == 0", "numa: Tessera publishes no such attribute"),
        (
            "device.capacity['gpu.nvidia.com'].copyEngines > 1",
            "copyEngines: Tessera publishes no such capacity",
        ),
        ("device.attributes['compute-domain.nvidia.com'].id == 'x'", "another driver's attributes"),
        ("device.allowMultipleAllocations", "device.allowMultipleAllocations"),
        ("device.attributes[d].uuid == 'x'", "device.attributes['DOMAIN'].NAME"),
        (f"{NV}['productName'] == 'x'", "device.attributes['gpu.nvidia.com'].NAME"),
        ("device.attributes['gpu.nvidia.com\\u002e'].uuid == 'x'", "plain string"),
        (f"{NV}.uuid == 'unclosed", "not closed"),
        (f"{NV}.uuid == `x`", "unexpected character"),
        ("x" * (MAX_EXPRESSION + 1), "at most"),
    ],
)
def test_what_has_no_counterpart_is_refused_by_name(expression: str, named: str) -> None:
    with pytest.raises(ConversionError, match=None) as e:
        rewrite(expression)
    assert named in str(e.value)


_names = st.sampled_from(sorted(ATTRIBUTES))
_literal = st.text(alphabet=st.sampled_from("ab '\"\\.[]/&|()"), max_size=12)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@given(st.lists(st.tuples(_names, _literal, st.booleans()), min_size=1, max_size=6))
def test_any_conjunction_of_mapped_attributes_converts_with_its_literals_intact(
    parts: list[tuple[str, str, bool]],
) -> None:
    """Random selectors over the attributes both drivers publish, with literals holding quotes, escapes and
    look-alikes: the result reads only Tessera's domain outside literals, and every literal is the same."""
    nvidia = " && ".join(f"{NV}.{name} {'==' if eq else '!='} {_quoted(value)}" for name, value, eq in parts)
    tessera = rewrite(nvidia)
    before, after = tokens(nvidia), tokens(tessera)
    assert len(before) == len(after)
    for b, a in zip(before, after, strict=True):
        if b.kind == "string" and b.value == "gpu.nvidia.com":
            assert a.text == "'gpu.tessera.dev'"
        else:
            assert (a.kind, a.text) == (b.kind, b.text)
    assert rewrite(tessera) == tessera  # converting twice changes nothing


@given(st.text(max_size=200))
def test_any_text_is_converted_or_refused_never_crashes(text: str) -> None:
    try:
        out = rewrite(text)
    except ConversionError:
        return
    assert len(out) <= len(text) + len(text) // 3 + 8  # only a domain of a similar length is swapped in


def test_capacities_are_the_ones_both_drivers_publish() -> None:
    assert {"memory", "multiprocessors"} == CAPACITIES
