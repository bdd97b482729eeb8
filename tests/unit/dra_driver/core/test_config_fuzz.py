"""A bounded, seeded fuzz pass over the opaque-config decoder: whatever a claim carries, the answer is a
decoded config or a short ConfigError naming the field; never another exception, never a long message."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.core import config as cfg
from dra_driver.core import families
from dra_driver.core.families import vgpu
from dra_driver.core.families.vgpu import VgpuConfig
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import CONFIG_API_VERSION

FUZZ = settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
MAX_ERROR_CHARS = 600

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.text(min_size=5000, max_size=20_000),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(["apiVersion", "kind", "smLimitPolicy", "priority", "logLevel"]) | st.text(
    max_size=3000
)
field_values = st.one_of(
    json_values,
    st.sampled_from(
        [CONFIG_API_VERSION, "VgpuConfig", "GpuConfig", "MigConfig", "force", "default", "disable", 0, 1, 4]
    ),
)
objects = st.dictionaries(field_names, field_values, max_size=6)
# what the API hands over, and what a string parameter could hold
parameters = st.one_of(
    objects,
    json_values,
    objects.map(json.dumps),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=200_000).map(lambda n: '{"a":' * n),
)


def entry(params: object, index: int) -> cfg.OpaqueConfig:
    return cfg.OpaqueConfig(cfg.ConfigSource.FROM_CLAIM, (), params, index)


@FUZZ
@given(params=parameters, index=st.integers(min_value=0, max_value=10**6))
def test_decode_answers_a_config_or_a_short_error_naming_the_field(params: Any, index: int) -> None:
    try:
        decoded = cfg.decode(entry(params, index))
    except ConfigError as e:
        message = str(e)
        assert message.startswith(f"config[{index}] (FromClaim) opaque.parameters"), message[:200]
        assert len(message) <= MAX_ERROR_CHARS, message[:200]
        return
    assert families.by_config_kind(decoded.kind) is not None
    resolved = cfg.resolve([(entry(params, index), decoded)], request="r", family=decoded.family)
    if decoded.family == vgpu.NAME:
        assert isinstance(resolved, VgpuConfig)
        assert resolved.priority in (0, 1) and 0 <= resolved.log_level <= 4
