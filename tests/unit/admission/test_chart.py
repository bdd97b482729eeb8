"""The chart's webhook: 2 replicas, a PDB, Fail with matchConditions, no side effects, TLS its own or
cert-manager's, RBAC for exactly its calls, an optional NetworkPolicy."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.convert.names import all_resource_names
from admission.review import claim_match_expression, match_expression
from tests.support.rest_call_scan import granted_by, rest_permissions, sources_of

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "tessera"
CACHE = Path(os.environ.get("TESSERA_CACHE", Path.home() / ".cache" / "tessera"))
HELM = shutil.which("helm") or next((str(p) for p in [CACHE / "helm" / "helm"] if p.exists()), None)
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm: run deploy/helm/build-helm.sh")


def render(*extra: str) -> dict[tuple[str, str], dict[str, Any]]:
    assert HELM is not None
    done = subprocess.run(
        [HELM, "template", "t", str(CHART), "--namespace", "gpu", "--kube-version", "1.36.3", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}


def test_off_by_default() -> None:
    assert not any(name == "tessera-admission" for _, name in render())


def test_webhook_deployment_pdb_and_configuration() -> None:
    objs = render("--set", "admissionWebhook.enabled=true")
    deployment = objs[("Deployment", "tessera-admission")]
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["tessera", "webhook"]
    assert (
        "--secret=tessera-admission-tls" in container["args"]
        and "--volcano=auto" in container["args"]
        and not any(a.startswith("--replace-scheduler") for a in container["args"])
    )
    assert objs[("PodDisruptionBudget", "tessera-admission")]["spec"]["minAvailable"] == 1
    hook = objs[("MutatingWebhookConfiguration", "tessera-admission")]["webhooks"][0]
    # answering writes nothing: a forged review can change nothing (admission/templates.py makes templates)
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["matchConditions"][0]["expression"] == match_expression(all_resource_names())
    service = {"name": "tessera-admission", "namespace": "gpu", "path": "/mutate", "port": 443}
    assert hook["clientConfig"]["service"] == service
    assert ("Role", "tessera-admission") in objs and ("Certificate", "tessera-admission") not in objs


def webhook_args(*extra: str) -> list[str]:
    objs = render("--set", "admissionWebhook.enabled=true", *extra)
    args: list[str] = objs[("Deployment", "tessera-admission")]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    return args


def test_volcano_and_the_replaced_schedulers_reach_the_webhook() -> None:
    args = webhook_args(
        "--set", "admissionWebhook.volcano=remove", "--set", "admissionWebhook.replaceSchedulers={a,b}"
    )
    assert [a for a in args if a.startswith(("--volcano", "--replace"))] == [
        "--volcano=remove",
        "--replace-scheduler=a",
        "--replace-scheduler=b",
    ]


def test_cert_manager_is_used_when_served() -> None:
    objs = render("--set", "admissionWebhook.enabled=true", "--api-versions", "cert-manager.io/v1")
    assert objs[("Certificate", "tessera-admission")]["spec"]["secretName"] == "tessera-admission-tls"
    config = objs[("MutatingWebhookConfiguration", "tessera-admission")]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpu/tessera-admission"
    args = objs[("Deployment", "tessera-admission")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--cert-dir=/tls" in args and ("Role", "tessera-admission") not in objs


def test_rbac_grants_exactly_the_calls_the_webhook_makes() -> None:
    objs = render("--set", "admissionWebhook.enabled=true")
    rules = objs[("ClusterRole", "tessera-admission")]["rules"] + objs[("Role", "tessera-admission")]["rules"]
    need = {
        (p.group, p.resource, p.verb): calls
        for p, calls in rest_permissions(sources_of(ROOT / "admission")).items()
    }
    templates = ("resource.k8s.io", "resourceclaimtemplates")
    assert set(need) >= {  # the scan sees the known calls
        ("", "pods", "watch"), (*templates, "list"), (*templates, "create"), (*templates, "delete"),
        ("", "secrets", "update"), ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
    }  # fmt: skip
    have = {(p.group, p.resource, p.verb) for p in granted_by(rules)}  # names apart: the chart pins those
    assert not {p: need[p] for p in need if p not in have}, "a call without a rule"
    assert not have - set(need), "a rule no call needs"


def test_the_webhook_may_no_longer_create_anything_but_templates_secrets_and_events() -> None:
    objs = render("--set", "admissionWebhook.enabled=true")
    writes = {
        (r, v)
        for rule in objs[("ClusterRole", "tessera-admission")]["rules"]
        for r in rule["resources"]
        for v in rule["verbs"]
        if v in ("create", "update", "patch", "delete")
    }
    assert writes == {
        ("resourceclaimtemplates", "create"),
        ("resourceclaimtemplates", "delete"),
        ("events", "create"),
        ("mutatingwebhookconfigurations", "patch"),
    }


def test_no_network_policy_unless_asked() -> None:
    assert ("NetworkPolicy", "tessera-admission") not in render("--set", "admissionWebhook.enabled=true")


def test_the_network_policy_lets_only_the_api_server_reach_the_port() -> None:
    objs = render(
        "--set", "admissionWebhook.enabled=true", "--set", "admissionWebhook.networkPolicy.enabled=true",
        "--set", "admissionWebhook.port=9443",
        "--set-json", 'admissionWebhook.networkPolicy.apiServerCIDRs=["10.0.0.10/32","fd00::1/128"]',
        "--set-json", 'admissionWebhook.networkPolicy.extraFrom=[{"ipBlock":{"cidr":"10.1.0.0/24"}}]',
    )  # fmt: skip
    policy = objs[("NetworkPolicy", "tessera-admission")]
    spec = policy["spec"]
    pods = objs[("Deployment", "tessera-admission")]["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pods.items() and spec["policyTypes"] == ["Ingress"]
    rule, metrics_rule = spec["ingress"]
    # the metrics port (plain HTTP, counts of closed sets only) is open to any scraper unless metricsFrom says
    assert metrics_rule == {"ports": [{"protocol": "TCP", "port": 9401}]}
    assert rule["from"] == [
        {"ipBlock": {"cidr": "10.0.0.10/32"}},
        {"ipBlock": {"cidr": "fd00::1/128"}},
        {"ipBlock": {"cidr": "10.1.0.0/24"}},
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9443}]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "apiServerCIDRs: give the API server's source addresses"),
        (("--set", "admissionWebhook.hostNetwork=true", "--set-json",
          'admissionWebhook.networkPolicy.apiServerCIDRs=["10.0.0.10/32"]'),
         "does not apply to a pod in the node"),
        (("--set-json", 'admissionWebhook.networkPolicy.apiServerCIDRs=["10.0.0.10"]'), "apiServerCIDRs/0"),
    ],
    ids=["no-cidrs", "host-network", "not-a-cidr"],
)  # fmt: skip
def test_a_network_policy_that_cannot_work_is_refused(extra: tuple[str, ...], message: str) -> None:
    assert HELM is not None
    done = subprocess.run(
        [HELM, "template", "t", str(CHART), "--kube-version", "1.36.3",
         "--set", "admissionWebhook.enabled=true", "--set", "admissionWebhook.networkPolicy.enabled=true",
         *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_host_network_port_placement_and_api_server_address() -> None:
    """Where the API server cannot reach pod addresses (nor pods the Service's cluster IP): the webhook in
    the node's network on a port of its own, placed by selector, reaching the API server as the plugin does.
    """
    objs = render(
        "--set", "admissionWebhook.enabled=true", "--set", "admissionWebhook.hostNetwork=true",
        "--set", "admissionWebhook.port=9443", "--set", "apiServer.host=10.0.0.1",
        "--set", "apiServer.port=6443", "--set", "admissionWebhook.nodeSelector.pool=system",
        "--set-json", 'admissionWebhook.tolerations=[{"key":"system","operator":"Exists"}]',
    )  # fmt: skip
    spec = objs[("Deployment", "tessera-admission")]["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [{"key": "system", "operator": "Exists"}]
    container = spec["containers"][0]
    assert "--port=9443" in container["args"]
    # the metrics port is a host port too (admissionWebhook.metrics.port)
    https, scraped = {"name": "https", "containerPort": 9443}, {"name": "metrics", "containerPort": 9401}
    assert container["ports"] == [https, scraped]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "6443",
    }
    # the Service still reaches it by the ports' names
    ports = objs[("Service", "tessera-admission")]["spec"]["ports"]
    assert [p["targetPort"] for p in ports] == ["https", "metrics"]


def test_pod_network_by_default() -> None:
    spec = render("--set", "admissionWebhook.enabled=true")[("Deployment", "tessera-admission")]["spec"]
    pod = spec["template"]["spec"]
    assert "hostNetwork" not in pod and "nodeSelector" not in pod and "tolerations" not in pod
    container = pod["containers"][0]
    assert "--port=8443" in container["args"] and "env" not in container


def test_claims_written_for_nvidias_driver_reach_the_webhook_too() -> None:
    """Issue #36: ResourceClaims and templates naming NVIDIA's DeviceClasses are converted at admission; each
    kind has its own webhook so its condition reads its own spec (a failing condition refuses the claim)."""
    objs = render("--set", "admissionWebhook.enabled=true")
    hooks = {h["name"]: h for h in objs[("MutatingWebhookConfiguration", "tessera-admission")]["webhooks"]}
    for resource, kind in (
        ("resourceclaims", "ResourceClaim"),
        ("resourceclaimtemplates", "ResourceClaimTemplate"),
    ):
        hook = hooks[f"{resource}.admission.tessera.dev"]
        assert hook["rules"] == [
            {
                "apiGroups": ["resource.k8s.io"],
                "apiVersions": ["v1"],
                "resources": [resource],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ]
        assert hook["matchConditions"][0]["expression"] == claim_match_expression(kind)
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        assert hook["clientConfig"] == hooks["pods.admission.tessera.dev"]["clientConfig"]


def test_the_webhook_serves_its_metrics_on_a_port_of_its_own_by_default() -> None:
    """Issue #36: tessera_webhook_* over plain HTTP (admission/metrics.py), the Service's `metrics` port."""
    objs = render("--set", "admissionWebhook.enabled=true")
    container = objs[("Deployment", "tessera-admission")]["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-address=:9401" in container["args"]
    assert {"name": "metrics", "containerPort": 9401} in container["ports"]
    service = objs[("Service", "tessera-admission")]
    assert {"name": "metrics", "port": 9401, "targetPort": "metrics"} in service["spec"]["ports"]
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "admission"

    objs = render("--set", "admissionWebhook.enabled=true", "--set", "admissionWebhook.metrics.enabled=false")
    container = objs[("Deployment", "tessera-admission")]["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-address=" in container["args"]
    assert [p["name"] for p in container["ports"]] == ["https"]
    assert [p["name"] for p in objs[("Service", "tessera-admission")]["spec"]["ports"]] == ["https"]


def test_the_monitors_cover_the_webhook_when_asked() -> None:
    monitors = ("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true",
                "--set", "metrics.serviceMonitor.labels.release=prom")  # fmt: skip
    objs = render("--set", "admissionWebhook.enabled=true", *monitors)
    service = objs[("Service", "tessera-admission")]
    pods = objs[("Deployment", "tessera-admission")]["spec"]["template"]["metadata"]["labels"]
    monitor = objs[("ServiceMonitor", "tessera-admission")]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["honorLabels"]) == ("metrics", "/metrics", True)
    pod_monitor = objs[("PodMonitor", "tessera-admission")]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pods.items()
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    # the node plugin's monitors do not select the webhook's Service or pods (no target scraped twice)
    plugin = objs[("ServiceMonitor", "tessera-node-plugin")]["spec"]["selector"]["matchLabels"]
    assert not plugin.items() <= service["metadata"]["labels"].items()

    for off in ("admissionWebhook.metrics.enabled=false", "admissionWebhook.enabled=false"):
        objs = render("--set", "admissionWebhook.enabled=true", *monitors, "--set", off)
        assert ("ServiceMonitor", "tessera-admission") not in objs
        assert ("PodMonitor", "tessera-admission") not in objs
    assert ("ServiceMonitor", "tessera-admission") not in render("--set", "admissionWebhook.enabled=true")


def test_the_network_policy_lets_only_metrics_from_reach_the_metrics_port() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objs = render(
        "--set", "admissionWebhook.enabled=true", "--set", "admissionWebhook.networkPolicy.enabled=true",
        "--set-json", 'admissionWebhook.networkPolicy.apiServerCIDRs=["10.0.0.10/32"]',
        "--set-json", f"admissionWebhook.networkPolicy.metricsFrom=[{json.dumps(peer)}]",
    )  # fmt: skip
    _, metrics_rule = objs[("NetworkPolicy", "tessera-admission")]["spec"]["ingress"]
    assert metrics_rule == {"ports": [{"protocol": "TCP", "port": 9401}], "from": [peer]}
    objs = render(
        "--set", "admissionWebhook.enabled=true", "--set", "admissionWebhook.networkPolicy.enabled=true",
        "--set-json", 'admissionWebhook.networkPolicy.apiServerCIDRs=["10.0.0.10/32"]',
        "--set", "admissionWebhook.metrics.enabled=false",
    )  # fmt: skip
    assert len(objs[("NetworkPolicy", "tessera-admission")]["spec"]["ingress"]) == 1
