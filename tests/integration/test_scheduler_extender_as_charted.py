"""The scheduler extender started with the very command, arguments and environment the chart renders for it
(issue #32): it takes every flag, reads the mix from where the chart mounts it, logs JSON, answers the
liveness probe's /healthz at once and the readiness probe's /readyz 503 while its watches have not listed
(here: no API server), then stops on SIGTERM as a pod's container is stopped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.loopback import http_status

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "tessera"
CACHE = Path(os.environ.get("TESSERA_CACHE", Path.home() / ".cache" / "tessera"))
HELM = shutil.which("helm") or next((str(p) for p in [CACHE / "helm" / "helm"] if p.exists()), None)
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm: run deploy/helm/build-helm.sh")
MIX = "cpu_milli,memory_mib,num_gpu,gpu_milli,count\n8000,32768,1,500,7\n4000,16384,2,1000,3\n"
MOUNT = "/etc/tessera-extender/"
UNREACHABLE = {  # a kubeconfig whose API server refuses connections: the watches never list
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}


def charted_container(values: Path) -> dict[str, Any]:
    assert HELM is not None
    done = subprocess.run(
        [HELM, "template", "t", str(CHART), "--kube-version", "1.36.3", "-f", str(values),
         "--show-only", "templates/scheduler-extender.yaml"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [deployment] = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def logged(log: Path, process: subprocess.Popen[bytes], name: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The first log event called `name`; every line must be JSON (--log-format=json)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            event: dict[str, Any] = json.loads(line)
            if event.get("event") == name:
                return event
        assert process.poll() is None, log.read_text()
        time.sleep(0.2)
    raise AssertionError(f"no {name!r} within {timeout_s}s:\n{log.read_text()}")


@pytest.mark.timeout(120)
def test_the_extender_runs_as_the_chart_starts_it(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"schedulerExtender": {"enabled": True, "mix": {"csv": MIX}}}))
    container = charted_container(values)
    command, args = container["command"], container["args"]
    assert command[:2] == ["python3", "-m"]
    # the ConfigMap's mount is a temporary folder here; the port a free one; the API server a kubeconfig's
    (tmp_path / "mix.csv").write_text(MIX)
    args = [a.replace(MOUNT, f"{tmp_path}/") for a in args]
    assert f"--mix={tmp_path}/mix.csv" in args
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(UNREACHABLE))
    extra = ["--port=0", "--address=127.0.0.1", f"--kubeconfig={kubeconfig}"]
    log = tmp_path / "extender.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, *command[1:], *args, *extra], cwd=tmp_path, stdout=sink, stderr=sink
        )
    try:
        port = int(logged(log, process, "extender serving")["port"])
        assert http_status(port, "/healthz") == 200  # the liveness probe: alive, whatever the API server does
        assert http_status(port, "/readyz") == 503  # the readiness probe: not scoring from an empty view
        scoring = logged(log, process, "scoring")
        # the mounted mix's two shapes (not openb's), and the chart's defaults for the shipped configuration
        assert (scoring["kinds"], scoring["unit"], scoring["cpu_pods"]) == (2, 40.0, True)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 0, log.read_text()
