"""The chart's scheduler extender (issue #32): off by default; on, a Deployment of 2 replicas running
`python -m scheduler_extender` from the image, non-root on a read-only root, probed on /readyz and /healthz,
behind the Service that deploy/scheduler/kube-scheduler-extender-config.yaml names, with RBAC of exactly
list and watch on the four kinds it watches."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.rest_call_scan import Permission, rest_permissions, sources_of

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "tessera"
CACHE = Path(os.environ.get("TESSERA_CACHE", Path.home() / ".cache" / "tessera"))
HELM = shutil.which("helm") or next((str(p) for p in [CACHE / "helm" / "helm"] if p.exists()), None)
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm: run deploy/helm/build-helm.sh")
NAME = "tessera-scheduler-extender"
ON = ("--set", "schedulerExtender.enabled=true")


def helm_template(*extra: str, namespace: str = "gpu") -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run(
        [HELM, "template", "t", str(CHART), "--namespace", namespace, "--kube-version", "1.36.3", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def render(*extra: str, namespace: str = "gpu") -> dict[tuple[str, str], dict[str, Any]]:
    done = helm_template(*extra, namespace=namespace)
    assert done.returncode == 0, done.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}


def pod_spec(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = objs[("Deployment", NAME)]["spec"]["template"]["spec"]
    return spec


def test_off_by_default_nothing_of_it_is_rendered() -> None:
    objs = render()
    assert not [key for key in objs if key[1].startswith(NAME)]
    labels = [d["metadata"].get("labels", {}).get("app.kubernetes.io/component") for d in objs.values()]
    assert "scheduler-extender" not in labels


def test_on_two_replicas_run_the_extender_from_the_image_behind_its_service() -> None:
    objs = render(*ON)
    deployment = objs[("Deployment", NAME)]
    assert deployment["spec"]["replicas"] == 2
    pod = pod_spec(objs)
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/tessera-dev/tessera:0.1.0"
    assert container["command"] == ["python3", "-m", "scheduler_extender"]
    assert container["args"] == [
        "--port=8888",
        "--unit=40",
        "--score-cpu-pods",
        "--log-format=json",
        "--log-level=info",
    ]
    # the image's packages are where image.json puts them (its launcher adds them; python3 -m needs them)
    site = json.loads((ROOT / "deploy" / "image" / "image.json").read_text())["paths"]["site"]
    assert {"name": "PYTHONPATH", "value": site} in container["env"]
    assert container["ports"] == [{"name": "http", "containerPort": 8888}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "volumes" not in pod and "volumeMounts" not in container  # the shipped mix, no ConfigMap

    service = objs[("Service", NAME)]
    assert service["metadata"]["namespace"] == "gpu"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8888, "targetPort": "http"}]
    pods = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pods.items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    pdb = objs[("PodDisruptionBudget", NAME)]["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"] == deployment["spec"]["selector"]


def test_rbac_is_exactly_list_and_watch_on_the_four_kinds_it_watches() -> None:
    objs = render(*ON)
    granted = {
        (g, r, v)
        for rule in objs[("ClusterRole", NAME)]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    need = rest_permissions(sources_of(ROOT / "scheduler_extender"))
    kinds = {
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaims"),
        ("", "nodes"),
        ("", "pods"),
    }
    assert set(need) == {Permission(*kind, verb) for kind in kinds for verb in ("list", "watch")}, need
    assert granted == {(p.group, p.resource, p.verb) for p in need}
    binding = objs[("ClusterRoleBinding", NAME)]
    assert binding["roleRef"]["name"] == NAME
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "gpu"}]
    assert not [key for key in objs if key[0] in ("Role", "RoleBinding") and key[1] == NAME]


def test_the_values_reach_its_flags_the_service_and_the_probes() -> None:
    objs = render(
        *ON, "--set", "schedulerExtender.replicas=3", "--set", "schedulerExtender.port=9999",
        "--set", "schedulerExtender.unit=50", "--set", "schedulerExtender.scoreCpuPods=false",
        "--set", "logLevel=debug", "--set", "schedulerExtender.clusterIP=10.96.0.88",
        "--set", "apiServer.host=10.0.0.1",
    )  # fmt: skip
    assert objs[("Deployment", NAME)]["spec"]["replicas"] == 3
    (container,) = pod_spec(objs)["containers"]
    assert container["args"] == [
        "--port=9999",
        "--unit=50",
        "--no-score-cpu-pods",
        "--log-format=json",
        "--log-level=debug",
    ]
    assert container["ports"] == [{"name": "http", "containerPort": 9999}]
    assert {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"} in container["env"]
    spec = objs[("Service", NAME)]["spec"]
    assert spec["ports"] == [{"name": "http", "port": 9999, "targetPort": "http"}]
    assert spec["clusterIP"] == "10.96.0.88"


def test_an_inline_mix_becomes_a_configmap_whose_change_rolls_the_replicas() -> None:
    def rendered(csv: str) -> dict[tuple[str, str], dict[str, Any]]:
        return render(*ON, "--set-string", f"schedulerExtender.mix.csv={csv}")

    csv = "cpu_milli\\,memory_mib\\,num_gpu\\,gpu_milli\\,count\n8000\\,32768\\,1\\,500\\,7\n"
    objs = rendered(csv)
    assert objs[("ConfigMap", f"{NAME}-mix")]["data"] == {"mix.csv": csv.replace("\\", "")}
    pod = pod_spec(objs)
    (container,) = pod["containers"]
    assert "--mix=/etc/tessera-extender/mix.csv" in container["args"]
    assert container["volumeMounts"] == [
        {"name": "mix", "mountPath": "/etc/tessera-extender", "readOnly": True}
    ]
    assert pod["volumes"] == [{"name": "mix", "configMap": {"name": f"{NAME}-mix"}}]
    checksum = objs[("Deployment", NAME)]["spec"]["template"]["metadata"]["annotations"]["checksum/mix"]
    other = rendered(csv.replace("7", "8"))[("Deployment", NAME)]["spec"]["template"]["metadata"]
    assert other["annotations"]["checksum/mix"] != checksum


def test_a_mix_of_your_own_configmap_is_mounted_not_made() -> None:
    objs = render(
        *ON,
        "--set",
        "schedulerExtender.mix.configMap=our-mix",
        "--set",
        "schedulerExtender.mix.key=shapes.csv",
    )
    assert ("ConfigMap", f"{NAME}-mix") not in objs
    pod = pod_spec(objs)
    assert pod["volumes"] == [{"name": "mix", "configMap": {"name": "our-mix"}}]
    assert "--mix=/etc/tessera-extender/shapes.csv" in pod["containers"][0]["args"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--set", "schedulerExtender.mix.csv=a", "--set", "schedulerExtender.mix.configMap=b"), "not both"),
        (("--set", "schedulerExtender.replicas=0"), "replicas"),
        (("--set", "schedulerExtender.unit=-1"), "unit"),
        (("--set", "schedulerExtender.mixFile=x"), "mixFile"),
    ],
    ids=["two-mixes", "no-replica", "negative-unit", "unknown-key"],
)
def test_values_that_cannot_work_are_refused(extra: tuple[str, ...], message: str) -> None:
    done = helm_template(*ON, *extra)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_the_shipped_scheduler_configuration_names_the_service_the_install_docs_make() -> None:
    """kube-scheduler-extender-config.yaml's urlPrefix (both verbs') is the chart's Service in the namespace
    docs/install.md installs the chart into, at the default port."""
    install = (ROOT / "docs" / "install.md").read_text()
    [namespace] = set(re.findall(r"^helm install tessera deploy/helm/tessera -n (\S+)", install, re.M))
    objs = render(*ON, namespace=namespace)
    service = objs[("Service", NAME)]
    port = service["spec"]["ports"][0]["port"]
    configuration = yaml.safe_load(
        (ROOT / "deploy" / "scheduler" / "kube-scheduler-extender-config.yaml").read_text()
    )
    stanzas = configuration["extenders"]
    assert [s["prioritizeVerb"] for s in stanzas] == ["prioritize", "fill"]
    for stanza in stanzas:
        assert stanza["urlPrefix"] == f"http://{NAME}.{service['metadata']['namespace']}.svc:{port}/"
        # down or failing, it is skipped: a pod never waits for it
        assert stanza["ignorable"] is True


def notes(tmp_path: Path, *extra: str) -> str:
    """NOTES.txt as `helm install` prints it (helm template renders no NOTES: a copy of the chart carries it
    as an ordinary template, as tests/unit/deploy/test_helm_chart.py does)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "zz-notes.yaml").write_text(
        "notes: |\n" + "".join(f"  {line}\n" for line in text.splitlines())
    )
    assert HELM is not None
    done = subprocess.run(
        [HELM, "template", "t", str(chart), "-n", "gpu", "--kube-version", "1.36.3",
         "--show-only", "templates/zz-notes.yaml", *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return " ".join(str(yaml.safe_load(done.stdout)["notes"]).split())


def test_the_notes_say_where_to_point_kube_scheduler_only_when_it_is_on(tmp_path: Path) -> None:
    text = notes(tmp_path, *ON, "--set", "schedulerExtender.port=9999")
    assert f"urlPrefix: http://{NAME}.gpu.svc:9999/" in text and "ignorable" in text
    assert "scheduler extender" not in notes(tmp_path / "off")
