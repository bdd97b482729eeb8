"""The controller manager's and the scheduler's client QPS/burst are a setting of the e2e control plane."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from e2e.controlplane import settings
from e2e.controlplane.certs import KeyPair, Pki
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.flags import (
    controller_manager_args,
    load_scheduler_configuration,
    scheduler_args,
    scheduler_config,
)
from e2e.controlplane.launcher import ControlPlane

STATE = Path("/tmp/state")


def _pki() -> Pki:
    pair = KeyPair(cert=Path("/tmp/c.crt"), key=Path("/tmp/c.key"))
    return Pki(
        directory=Path("/tmp/pki"),
        ca=pair,
        apiserver=pair,
        admin=pair,
        controller_manager=pair,
        scheduler=pair,
        service_account_key=Path("/tmp/sa.key"),
        service_account_pub=Path("/tmp/sa.pub"),
    )


def test_the_controller_manager_gets_its_rate_as_flags() -> None:
    args = controller_manager_args(STATE, _pki(), 1, rate=settings.ClientRate(qps=12.5, burst=9))
    assert "--kube-api-qps=12.5" in args and "--kube-api-burst=9" in args
    defaults = controller_manager_args(STATE, _pki(), 1)
    assert "--kube-api-qps=20" in defaults and "--kube-api-burst=30" in defaults


def test_the_scheduler_gets_its_rate_in_its_config_file() -> None:
    config = scheduler_config(STATE, rate=settings.PRODUCTION.scheduler)
    assert config["clientConnection"] == {
        "kubeconfig": str(STATE / "scheduler.kubeconfig"),
        "qps": 200,
        "burst": 400,
    }
    assert config["leaderElection"] == {"leaderElect": False}
    args = scheduler_args(STATE, 1)
    assert f"--config={STATE / 'scheduler-config.yaml'}" in args
    # flags the config file would make the scheduler ignore are not given
    assert not any(a.startswith(("--kubeconfig", "--kube-api-", "--leader-elect")) for a in args)


def test_rates_are_named_and_checked() -> None:
    assert settings.client_rates("production") is settings.PRODUCTION
    with pytest.raises(ControlPlaneError, match="use one of defaults, production"):
        settings.client_rates("fast")
    with pytest.raises(ControlPlaneError, match="must be positive"):
        settings.ClientRate(qps=0, burst=1)


@pytest.mark.e2e
def test_the_running_scheduler_uses_the_configured_rate(control_plane: ControlPlane) -> None:
    """kube-scheduler logs the configuration it runs with (at --v=2): the file's rate, not a default."""
    text = (control_plane.state_dir / "logs" / "kube-scheduler.log").read_text(encoding="utf-8")
    block = re.search(r"clientConnection:\n((?:\s+\w+: .*\n)+)", text)
    assert block is not None, text[-2000:]
    rate = control_plane.client_rates.scheduler
    assert re.search(rf"\bqps: {rate.qps:g}\n", block.group(1)), block.group(1)
    assert re.search(rf"\bburst: {rate.burst}\n", block.group(1)), block.group(1)


@pytest.mark.parametrize("shipped", ["kube-scheduler-config.yaml", "kube-scheduler-extender-config.yaml"])
def test_a_scheduler_configuration_of_ours_keeps_its_fields_but_not_its_client(shipped: str) -> None:
    path = Path(__file__).resolve().parents[3] / "deploy" / "scheduler" / shipped
    base = load_scheduler_configuration(path)
    config = scheduler_config(
        STATE, rate=settings.PRODUCTION.scheduler, base={**base, "clientConnection": {}}
    )
    assert base["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert {k: v for k, v in config.items() if k in base} == base
    # the plane's client and leader election replace whatever the file says
    assert config["clientConnection"] == {
        "kubeconfig": str(STATE / "scheduler.kubeconfig"),
        "qps": 200,
        "burst": 400,
    }
    assert config["leaderElection"] == {"leaderElect": False}
    assert "profiles" not in scheduler_config(STATE) and "extenders" not in scheduler_config(STATE)
    extenders = base.get("extenders", [])
    assert isinstance(extenders, list)
    # a down extender must never hold a pod
    assert all(e["ignorable"] is True and e["prioritizeVerb"] in ("prioritize", "fill") for e in extenders)


def test_a_scheduler_configuration_that_is_not_one_is_refused(tmp_path: Path) -> None:
    wrong_kind = tmp_path / "policy.yaml"
    wrong_kind.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: Policy\n", encoding="utf-8")
    with pytest.raises(ControlPlaneError, match="kind KubeSchedulerConfiguration"):
        load_scheduler_configuration(wrong_kind)
    a_list = tmp_path / "list.yaml"
    a_list.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(ControlPlaneError, match="must be a mapping"):
        load_scheduler_configuration(a_list)
    with pytest.raises(ControlPlaneError, match="cannot read"):
        load_scheduler_configuration(tmp_path / "absent.yaml")
