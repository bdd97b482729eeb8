"""Tessera's scheduler extender (scheduler_extender) beside the bench's control plane: one replica on a free
local port, the shipped configuration's extender stanza pointed at it."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.flags import SCHEDULER_API, load_scheduler_configuration
from e2e.controlplane.processes import is_alive, log_tail
from e2e.controlplane.state import ComponentRecord
from e2e.harness.node import spawn_python

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "deploy" / "scheduler" / "kube-scheduler-extender-config.yaml"


def with_extender_at(configuration: Mapping[str, object] | None, port: int) -> dict[str, object]:
    """The shipped configuration as a user installs it (None), or `configuration` with the shipped extender
    stanza added (a lever on top of another configuration); its URL at 127.0.0.1:`port`."""
    shipped: dict[str, Any] = dict(load_scheduler_configuration(SHIPPED))
    base = dict(configuration) if configuration is not None else shipped
    base.setdefault("apiVersion", SCHEDULER_API)
    base.setdefault("kind", "KubeSchedulerConfiguration")
    base["extenders"] = [
        {**stanza, "urlPrefix": f"http://127.0.0.1:{port}/"} for stanza in shipped["extenders"]
    ]
    return base


def start_extender(
    kubeconfig: Path, port: int, log_path: Path, *, timeout_s: float = 60.0
) -> ComponentRecord:
    """`python -m scheduler_extender` on 127.0.0.1:`port`, once it is ready (its watches have listed)."""
    record = spawn_python(
        name="scheduler-extender",
        args=[
            "-m",
            "scheduler_extender",
            f"--kubeconfig={kubeconfig}",
            "--address=127.0.0.1",
            f"--port={port}",
            "--log-level=warning",
        ],
        log_path=log_path,
        die_with_parent=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(record.pid):
            raise ControlPlaneError(f"the scheduler extender exited:\n{log_tail(log_path)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return record
        except OSError:
            pass
        time.sleep(0.5)
    raise ControlPlaneError(
        f"the scheduler extender was not ready within {timeout_s}s:\n{log_tail(log_path)}"
    )


def extender_stats(port: int) -> dict[str, int]:
    """The extender's call counts (GET /stats); empty when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as answer:
            found = json.loads(answer.read())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in found.items()} if isinstance(found, dict) else {}
