"""A Prometheus server for an e2e scenario: the upstream `prometheus` built from its Go module by
e2e/prometheus/build.sh, started on loopback with a scrape configuration and rule files the scenario gives,
and read only through its HTTP API (/api/v1/query, /api/v1/targets, /api/v1/rules)."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.processes import Component, log_tail, spawn, stop_component
from e2e.harness.kube import Json, wait_for

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "e2e" / "prometheus" / "build.sh"


class PrometheusNotBuiltError(Exception):
    """`make promtool` has not built the server (or built it from other inputs)."""


def prometheus_binary() -> Path:
    """The server build.sh made; raises when it is missing or out of date (the build is `make promtool`'s)."""
    command = ["bash", str(BUILD), "--check"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise PrometheusNotBuiltError(f"run `make promtool`: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1]) / "prometheus"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Series:
    """One element of an instant query's result: its labels and its value (a string: "NaN" stays one)."""

    labels: dict[str, str]
    value: str


class PrometheusServer:
    """One running server; `query` and friends talk to it over HTTP."""

    def __init__(self, *, component: Component, url: str, directory: Path) -> None:
        self.component = component
        self.url = url
        self.directory = directory

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}{'?' + query if query else ''}", timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[Series]:
        """An instant query, now; a vector (a scalar is one unlabelled series)."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [Series(labels={}, value=str(data["result"][1]))]
        return [Series(labels=dict(r["metric"]), value=str(r["value"][1])) for r in data["result"]]

    def label_values(self, label: str, *, match: str) -> list[str]:
        """What Grafana's `label_values(match, label)` lists."""
        found: list[str] = self._get(f"/api/v1/label/{label}/values", **{"match[]": match})
        return found

    def targets(self) -> list[Json]:
        active: list[Json] = self._get("/api/v1/targets", state="active")["activeTargets"]
        return active

    def rules(self) -> list[Json]:
        """Every rule of every group as the server loaded it (with its state and health)."""
        groups = self._get("/api/v1/rules")["groups"]
        return [r for g in groups for r in g["rules"]]

    def alerts(self, name: str) -> list[Json]:
        """The active alerts of rule `name` (pending or firing)."""
        return [a for r in self.rules() if r.get("name") == name for a in r.get("alerts") or []]

    def healthy_targets(self, job_substring: str) -> list[Json]:
        return [
            t for t in self.targets() if job_substring in t["labels"].get("job", "") and t["health"] == "up"
        ]

    def log_tail(self) -> str:
        return log_tail(self.component.log)


@contextmanager
def running_prometheus(
    directory: Path, *, scrape_configs: list[Json], rule_groups: list[Json], interval_s: float
) -> Iterator[PrometheusServer]:
    """A server under `directory` (configuration, rules, TSDB, log) scraping and evaluating every
    `interval_s`; stopped on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    rules = directory / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups}, sort_keys=False))
    interval = f"{int(interval_s * 1000)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(rules)],
        "scrape_configs": scrape_configs,
    }
    config_file = directory / "prometheus.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    port = _free_port()
    component = spawn(
        name="prometheus",
        binary=prometheus_binary(),
        args=[
            f"--config.file={config_file}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--log.level=info",
        ],
        log_path=directory / "prometheus.log",
        die_with_parent=True,
    )
    server = PrometheusServer(component=component, url=f"http://127.0.0.1:{port}", directory=directory)
    try:
        wait_for("Prometheus to be ready", lambda: _ready(server), timeout_s=30, interval_s=0.2)
        yield server
    finally:
        stop_component(component, grace_s=5.0)


def _ready(server: PrometheusServer) -> bool:
    if server.component.process.poll() is not None:
        raise AssertionError(f"prometheus exited:\n{server.log_tail()}")
    try:
        with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False
