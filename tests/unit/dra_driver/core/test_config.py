from __future__ import annotations

import json

import pytest

from dra_driver.core import config as cfg
from dra_driver.core.config_schema import SmLimitPolicy
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig
from dra_driver.core.families import vgpu as vgpu_family
from dra_driver.core.families.gpu import GpuConfig
from dra_driver.core.families.vgpu import VgpuConfig
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import CONFIG_API_VERSION


def entry(
    params: object, *, requests: tuple[str, ...] = (), source: str = "FromClaim", index: int = 0
) -> cfg.OpaqueConfig:
    return cfg.OpaqueConfig(cfg.ConfigSource(source), requests, params, index)


def vgpu(**fields: object) -> dict[str, object]:
    return {"apiVersion": CONFIG_API_VERSION, "kind": "VgpuConfig", **fields}


def test_decodes_every_vgpu_field() -> None:
    decoded = cfg.decode(entry(vgpu(smLimitPolicy="force", priority=0, logLevel=4), source="FromClass"))
    assert decoded.family == vgpu_family.NAME
    assert decoded.values == {"sm_limit_policy": SmLimitPolicy.FORCE, "priority": 0, "log_level": 4}


def test_empty_kinds_decode() -> None:
    for kind, family in (("GpuConfig", whole.NAME), ("MigConfig", mig.NAME)):
        assert cfg.decode(entry({"apiVersion": CONFIG_API_VERSION, "kind": kind})).family is family


def test_parameters_as_json_text() -> None:
    assert cfg.decode(entry(json.dumps(vgpu(priority=1)))).values == {"priority": 1}


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (
            vgpu(priority=0),
            "priority: 0 (high priority) holds the GPU's other claims back, so only a DeviceClass",
        ),
        (vgpu(smLimitPolicy="disable"), "smLimitPolicy: disable switches the claim's SM limit off, so only"),
    ],
)
def test_a_claim_cannot_raise_its_own_limit_or_hold_others_back(params: object, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg.decode(entry(params))
    assert needle in str(info.value)
    assert cfg.decode(entry(params, source="FromClass")).values  # an administrator's class may


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (vgpu(smLimt="force"), "config[3] (FromClaim) opaque.parameters.smLimt: unknown field in VgpuConfig"),
        ({"apiVersion": CONFIG_API_VERSION, "kind": "GpuConfig", "x": 1}, ".x: unknown field in GpuConfig"),
        (vgpu(priority="1"), ".priority: must be an integer 0-1"),
        (vgpu(priority=True), ".priority: must be an integer 0-1"),
        (vgpu(priority=2), ".priority: 2 is out of range"),
        (vgpu(logLevel=5), ".logLevel: 5 is out of range; use an integer 0-4"),
        (vgpu(logLevel=1.0), ".logLevel: must be an integer"),
        (vgpu(smLimitPolicy="fast"), ".smLimitPolicy: 'fast' is not one of default, force, disable"),
        (vgpu(smLimitPolicy=1), ".smLimitPolicy: must be a string"),
        (
            {"apiVersion": "resource.tessera.dev/v2", "kind": "VgpuConfig"},
            ".apiVersion: must be 'resource.tessera.dev/v1'",
        ),
        (
            {"apiVersion": CONFIG_API_VERSION, "kind": "TpuConfig"},
            ".kind: must be one of GpuConfig, VgpuConfig, MpsConfig, MigConfig",
        ),
        ({"apiVersion": CONFIG_API_VERSION}, ".kind: must be one of"),
        ([1, 2], "must be an object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_configs_name_the_field_and_the_fix(params: object, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg.decode(entry(params, index=3))
    assert needle in str(info.value)


def test_class_first_then_claim_later_wins_field_by_field() -> None:
    entries = cfg.ordered(
        [
            entry(vgpu(priority=1), index=0),  # claim
            entry(vgpu(logLevel=3, priority=0), source="FromClass", index=1),  # class
            entry(vgpu(smLimitPolicy="force"), index=2),  # claim, later
        ]
    )
    assert [e.index for e in entries] == [1, 0, 2]
    resolved = cfg.resolve(cfg.decode_all(entries), request="gpu", family=vgpu_family.NAME)
    assert resolved == VgpuConfig(sm_limit_policy=SmLimitPolicy.FORCE, priority=1, log_level=3)


def test_only_configs_naming_the_request_apply() -> None:
    decoded = cfg.decode_all(
        [
            entry(vgpu(priority=1), requests=("other",)),
            entry(vgpu(logLevel=2), requests=("gpu",)),
            entry(vgpu(logLevel=4), requests=("multi",)),
        ]
    )
    assert cfg.resolve(decoded, request="gpu", family=vgpu_family.NAME) == VgpuConfig(log_level=2)
    # a firstAvailable subrequest matches a config naming its parent request
    assert cfg.resolve(decoded, request="multi/h100", family=vgpu_family.NAME) == VgpuConfig(log_level=4)


def test_configs_of_another_family_are_skipped() -> None:
    decoded = cfg.decode_all([entry(vgpu(logLevel=3))])
    assert cfg.resolve(decoded, request="gpu", family=whole.NAME) == GpuConfig()
    assert cfg.resolve(decoded, request="gpu", family=vgpu_family.NAME) == VgpuConfig(log_level=3)


def test_defaults_without_configs() -> None:
    assert cfg.resolve((), request="gpu", family=vgpu_family.NAME) == VgpuConfig(
        sm_limit_policy=SmLimitPolicy.DEFAULT, priority=1, log_level=1
    )
