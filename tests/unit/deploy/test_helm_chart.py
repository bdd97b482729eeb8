"""The Helm chart lints, renders with default and non-default values, and agrees with deviceclasses/."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.core.device_order import DeviceOrder
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, vgpu
from dra_driver.core.families.capacity import SHARES
from dra_driver.core.families.oversubscription import OVERSUBSCRIPTION
from dra_driver.core.families.published import NumaForm
from dra_driver.core.settings import NodeSettings
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.removal.cleanup_marker import CLEANUP_DONE_FILE

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "tessera"
NON_DEFAULT = ROOT / "deploy" / "helm" / "ci" / "non-default-values.yaml"
# the e2e control plane's release (the file e2e/controlplane/releases.py reads); helm template assumes 1.20
# otherwise
KUBE = (ROOT / "e2e" / "cluster" / "k8s" / "default-version").read_text().strip().removeprefix("v")
CACHE = Path(os.environ.get("TESSERA_CACHE", Path.home() / ".cache" / "tessera"))


def _helm() -> str | None:
    return shutil.which("helm") or next((str(p) for p in [CACHE / "helm" / "helm"] if p.exists()), None)


HELM = _helm()
needs_helm = pytest.mark.skipif(HELM is None, reason="no helm: run deploy/helm/build-helm.sh")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120, check=False)


def render(*extra: str) -> list[dict[str, Any]]:
    done = helm(
        "template", "tessera", str(CHART), "--namespace", "tessera-system", "--kube-version", KUBE, *extra
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_chart_policy_files_are_the_deviceclasses_ones() -> None:
    for name in ("opaque-config-policy.yaml", "slice-writer-policy.yaml"):
        assert (CHART / "files" / name).read_text() == (ROOT / "deviceclasses" / name).read_text(), name


@needs_helm
@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["default", "non-default"])
def test_lint_passes(values: Path | None) -> None:
    done = helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    assert done.returncode == 0, done.stdout + done.stderr


@needs_helm
def test_default_render_matches_the_shipped_manifests_and_classes() -> None:
    objs = render()
    shipped = docs(ROOT / "deploy" / "manifests" / "tessera.yaml")
    assert [o for o in shipped if o["kind"] != "Namespace"] == objs, "run deploy/render-manifests.sh"
    repo: dict[str, dict[str, dict[str, Any]]] = {}
    for f in sorted((ROOT / "deviceclasses").glob("*.yaml")):
        for o in docs(f):
            repo.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    for kind in ("DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        rendered = by_kind(objs, kind)
        assert set(rendered) == set(repo[kind]), kind
        for name, o in rendered.items():
            assert o["spec"] == repo[kind][name]["spec"], name


@needs_helm
def test_daemonset_has_the_mounts_pod_uid_init_container_and_probe() -> None:
    objs = render()
    (ds,) = by_kind(objs, "DaemonSet").values()
    pod = ds["spec"]["template"]["spec"]
    paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert paths == {
        "/",
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
        "/var/lib/tessera/lib",
        "/var/lib/tessera/claims",
        "/var/lib/tessera/gpus",
        "/var/lib/tessera/mps",
    }
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    dirs = [
        "--kubelet-plugins-dir=/var/lib/kubelet/plugins",
        "--kubelet-registry-dir=/var/lib/kubelet/plugins_registry",
    ]
    assert c["livenessProbe"]["exec"]["command"] == ["tessera", "plugin", "probe", *dirs]
    ready_file = (
        f"/var/lib/kubelet/plugins/gpu.tessera.dev/{PluginPaths.defaults(pod_uid='$POD_UID').ready_file.name}"
    )
    assert c["readinessProbe"]["exec"]["command"] == ["/bin/sh", "-c", f"test -e {ready_file}"]
    assert "--log-format=json" in c["args"]
    assert not any(a.startswith("--mps-control") for a in c["args"])  # the driver root's
    assert "--mps-host-cgroup=/tessera-mps" in c["args"] and pod["hostPID"] is True
    assert "--mps-dir=/var/lib/tessera/mps" in c["args"]  # the directory the chart mounts
    for flag, path in (("--cdi-dir", "/var/run/cdi"), ("--claims-dir", "/var/lib/tessera/claims")):
        assert f"{flag}={path}" in c["args"]
    assert {"--driver-root=/", "--driver-root-mount=/driver-root"} <= set(c["args"])
    (root,) = [m for m in c["volumeMounts"] if m["name"] == "driver-root"]
    assert root == {
        "name": "driver-root",
        "mountPath": "/driver-root",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "void"  # nothing from the toolkit
    assert pod["initContainers"][0]["name"] == "install-library"
    settings = yaml.safe_load(by_kind(objs, "ConfigMap")[ds["metadata"]["name"]]["data"]["settings.yaml"])
    assert settings == {
        "apiVersion": "resource.tessera.dev/v1",
        "kind": "NodeSettings",
        "families": {"gpu": True, "vgpu": True, "mps": True, "mig": True},
        "sharesPerGpu": 10,
        "deviceOrder": "fragmentation-aware",
    }
    # what the node plugin reads: the chart's file must pass its strict decoder
    decoded = NodeSettings.from_mapping(settings, node_name="node-a")
    assert decoded == NodeSettings(node_name="node-a")


@needs_helm
def test_metrics_endpoint_service_and_monitors() -> None:
    objs = render()
    (ds,) = by_kind(objs, "DaemonSet").values()
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert "--metrics-address=:9400" in c["args"] and "--usage-status-interval=60" in c["args"]
    assert "--recover-fatal-xids" not in c["args"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    (svc,) = by_kind(objs, "Service").values()
    assert (
        svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["targetPort"] == 9400
    )  # a number: with hostNetwork no port is declared
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert not by_kind(objs, "ServiceMonitor") and not by_kind(objs, "PodMonitor"), "off unless asked"

    objs = render("-f", str(NON_DEFAULT))
    (monitor,) = by_kind(objs, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # the claim series' own namespace and pod win over the operator's target labels (test_real_prometheus.py)
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (pod_monitor,) = by_kind(objs, "PodMonitor").values()
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    args = by_kind(objs, "DaemonSet")["tessera-node-plugin-h100"]["spec"]["template"]["spec"]["containers"][0]
    wanted = {"--metrics-address=:9500", "--recover-fatal-xids", "--usage-status-interval=0"}
    assert wanted <= set(args["args"])

    off = render("--set", "metrics.enabled=false")
    (c,) = next(iter(by_kind(off, "DaemonSet").values()))["spec"]["template"]["spec"]["containers"]
    assert "--metrics-address=" in c["args"] and "ports" not in c and not by_kind(off, "Service")


@needs_helm
def test_rbac_is_least_privilege() -> None:
    (role,) = by_kind(render(), "ClusterRole").values()
    rules = {
        (tuple(r["apiGroups"]), tuple(r["resources"])): (set(r["verbs"]), r.get("resourceNames"))
        for r in role["rules"]
    }
    assert rules == {
        (("resource.k8s.io",), ("resourceslices",)): ({"list", "watch", "create", "update", "delete"}, None),
        (("resource.k8s.io",), ("resourceclaims",)): ({"get"}, None),
        (("resource.k8s.io",), ("resourceclaims/status",)): ({"patch"}, None),
        (("resource.k8s.io",), ("resourceclaims/driver",)): ({"associated-node:patch"}, ["gpu.tessera.dev"]),
        (("",), ("nodes",)): ({"get"}, None),
        (("",), ("events",)): ({"create"}, None),
    }


@needs_helm
def test_non_default_values_render_per_group_daemonsets_and_policy_user() -> None:
    objs = render("-f", str(NON_DEFAULT))
    daemonsets = by_kind(objs, "DaemonSet")
    assert set(daemonsets) == {"tessera-node-plugin-h100", "tessera-node-plugin-l4"}
    h100 = daemonsets["tessera-node-plugin-h100"]["spec"]["template"]["spec"]
    assert h100["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100["containers"][0]["image"] == "registry.example.com/tessera:9.9.9"
    assert "--log-format=console" in h100["containers"][0]["args"]
    maps = by_kind(objs, "ConfigMap")
    l4 = NodeSettings.from_mapping(
        yaml.safe_load(maps["tessera-node-plugin-l4"]["data"]["settings.yaml"]), node_name="n"
    )
    assert l4.families == {whole.NAME} and l4.setting(SHARES) == 1  # given as vgpuShares, its former name
    h100 = NodeSettings.from_mapping(
        yaml.safe_load(maps["tessera-node-plugin-h100"]["data"]["settings.yaml"]), node_name="n"
    )
    assert h100.families == {vgpu.NAME, mig.NAME} and h100.device_order is DeviceOrder.BY_GPU
    assert h100.setting(mig.PROFILES) == frozenset({"1g.10gb", "3g.40gb", "7g.80gb"})
    assert h100.numa_node_form is NumaForm.LIST and l4.numa_node_form is NumaForm.SCALAR
    assert h100.setting(OVERSUBSCRIPTION) == 1.5 and l4.setting(OVERSUBSCRIPTION) == 1
    assert set(by_kind(objs, "DeviceClass")) == {
        "gpu.tessera.dev",
        "vgpu.tessera.dev",
        "vgpu-oversubscribed.tessera.dev",
        "mps.tessera.dev",
        "mig.tessera.dev",
        "mig-1g.10gb.gpu.tessera.dev",
        "mig-7g.80gb.gpu.tessera.dev",
    }
    policies = by_kind(objs, "ValidatingAdmissionPolicy")
    assert set(policies) == {"node-slices.gpu.tessera.dev"}
    cond = policies["node-slices.gpu.tessera.dev"]["spec"]["matchConditions"][0]["expression"]
    assert "system:serviceaccount:tessera-system:gpu-plugin" in cond
    (sa,) = by_kind(objs, "ServiceAccount")
    assert sa == "gpu-plugin"


@needs_helm
def test_scheduler_version_reaches_every_groups_node_settings() -> None:
    objs = render("-f", str(NON_DEFAULT), "--set", "schedulerVersion=v1.36.1")
    for config_map in by_kind(objs, "ConfigMap").values():
        if "settings.yaml" in config_map.get("data", {}):
            settings = yaml.safe_load(config_map["data"]["settings.yaml"])
            assert NodeSettings.from_mapping(settings, node_name="n").scheduler_version == "v1.36.1"
    unset = by_kind(render("-f", str(NON_DEFAULT)), "ConfigMap")
    assert not any("schedulerVersion" in m.get("data", {}).get("settings.yaml", "") for m in unset.values())
    done = helm("template", "tessera", str(CHART), "--kube-version", KUBE, "--set", "schedulerVersion=vc")
    assert done.returncode != 0 and "/schedulerVersion" in done.stderr, done.stderr


@needs_helm
def test_setting_scheduler_version_rolls_the_plugin_pods() -> None:
    """The plugin reads NodeSettings at start: a `helm upgrade` that sets schedulerVersion must change the
    pod template (its settings hash), or the running plugins keep publishing what the new allocator cannot
    keep apart; unset, the hash is what it was."""

    def hashes(*extra: str) -> dict[str, str]:
        return {
            name: ds["spec"]["template"]["metadata"]["annotations"]["tessera.dev/settings"]
            for name, ds in by_kind(render("-f", str(NON_DEFAULT), *extra), "DaemonSet").items()
        }

    unset, v1361, v1362 = (
        hashes(),
        hashes("--set", "schedulerVersion=v1.36.1"),
        hashes("--set", "schedulerVersion=v1.36.2"),
    )
    assert unset.keys() == v1361.keys() == v1362.keys() and len(unset) >= 2
    for name in unset:
        assert len({unset[name], v1361[name], v1362[name]}) == 3, name
    assert hashes("--set", "schedulerVersion=") == unset


@needs_helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ("nodeGroups: [{name: x, families: [tpu], vgpuShares: 1}]", 'families: "tpu" is not one of'),
        (
            "nodeGroups: [{name: x, families: [vgpu], vgpuShares: 0}]",
            "at '/nodeGroups/0/vgpuShares': minimum",
        ),
        (
            "nodeGroups: [{name: x, families: [vgpu], vgpuShares: 65}]",
            "at '/nodeGroups/0/vgpuShares': maximum",
        ),
        (
            "nodeGroups: [{name: x, families: [vgpu], sharesPerGpu: 65}]",
            "at '/nodeGroups/0/sharesPerGpu': maximum",
        ),
        (
            "nodeGroups: [{name: x, families: [vgpu], sharesPerGpu: 4, vgpuShares: 10}]",
            "nodeGroups[x]: sharesPerGpu and vgpuShares (its former name) give different values; set "
            "sharesPerGpu only",
        ),
        (
            "nodeGroups: [{name: x, families: [mig], vgpuShares: 1, deviceOrder: best}]",
            'deviceOrder: "best" is not one of fragmentation-aware, by-gpu',
        ),
        (
            "nodeGroups: [{name: x, families: [mig], vgpuShares: 1, migProfiles: []}]",
            "at '/nodeGroups/0/migProfiles': minItems",
        ),
        (
            "nodeGroups: [{name: x, families: [gpu], vgpuShares: 1, numaNodeForm: lists}]",
            'numaNodeForm: "lists" is not one of scalar, list',
        ),
    ],
)
def test_bad_values_fail_with_the_field_named(values: str, message: str, tmp_path: Path) -> None:
    f = tmp_path / "values.yaml"
    f.write_text(values)
    done = helm("template", "tessera", str(CHART), "--kube-version", KUBE, "-f", str(f))
    assert done.returncode != 0 and message in done.stderr


@needs_helm
def test_driver_root_network_and_api_server_values() -> None:
    objs = render(
        "--set", "driverRoot=/run/nvidia/driver", "--set", "hostNetwork=true",
        "--set", "apiServer.host=10.0.0.5", "--set", "apiServer.port=6443",
        "--set", "extraEnv[0].name=X,extraEnv[0].value=y",
    )  # fmt: skip
    (ds,) = by_kind(objs, "DaemonSet").values()
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["driver-root"]["hostPath"] == {"path": "/run/nvidia/driver", "type": "Directory"}
    assert "--driver-root=/run/nvidia/driver" in c["args"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "ports" not in c  # a host port would keep a rolling update's second pod off the node
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"], env["X"]) == (
        "10.0.0.5",
        "6443",
        "y",
    )
    (auto,) = by_kind(render("--set", "driverRoot=auto"), "DaemonSet").values()
    auto_pod = auto["spec"]["template"]["spec"]
    assert {v["name"]: v for v in auto_pod["volumes"]}["driver-root"]["hostPath"]["path"] == "/"
    assert "--driver-root=auto" in auto_pod["containers"][0]["args"]


@needs_helm
def test_a_family_added_to_the_registry_reaches_the_classes_and_node_settings(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    with (chart / "files" / "families.yaml").open("a") as f:
        f.write("- name: widget\n")  # as deploy/render-manifests.sh writes it for a new family module
    values = tmp_path / "values.yaml"
    values.write_text("nodeGroups: [{name: x, families: [widget], vgpuShares: 1}]\n")
    done = helm("template", "t", str(chart), "--kube-version", KUBE, "-f", str(values))
    assert done.returncode == 0, done.stderr
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]
    widget = by_kind(objs, "DeviceClass")["widget.tessera.dev"]
    assert widget["spec"]["extendedResourceName"] == "gpu.tessera.dev/widget"
    assert '.type == "widget"' in widget["spec"]["selectors"][0]["cel"]["expression"]
    (settings,) = by_kind(objs, "ConfigMap").values()
    assert yaml.safe_load(settings["data"]["settings.yaml"])["families"] == {
        "gpu": False,
        "vgpu": False,
        "mps": False,
        "mig": False,
        "widget": True,
    }
    values.write_text("nodeGroups: [{name: x, families: [tpu], vgpuShares: 1}]\n")
    done = helm("template", "t", str(chart), "--kube-version", KUBE, "-f", str(values))
    assert "is not one of gpu, vgpu, mps, mig, widget" in done.stderr


@needs_helm
def test_cleanup_mode_installs_only_the_cleanup_daemonset_and_its_identity() -> None:
    objs = render("--set", "cleanup.enabled=true")
    kinds = {o["kind"] for o in objs}
    assert {"ConfigMap", "DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds
    assert not kinds & {"DeviceClass", "Service", "ValidatingAdmissionPolicy"}
    (ds,) = by_kind(objs, "DaemonSet").values()
    assert ds["metadata"]["name"] == "tessera-cleanup-default"
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["tessera", "cleanup"] and "initContainers" not in pod
    assert c["readinessProbe"]["exec"]["command"] == ["test", "-e", str(CLEANUP_DONE_FILE)]


@needs_helm
@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("nodeSettings.vgpuShares=3", "nodeSettings"),
        ("driverRoot=run/nvidia/driver", "driverRoot"),
        ("hostPaths.cdi=var/run/cdi", "/hostPaths/cdi"),
        ("mps.hostCgroup=tessera-mps", "/mps/hostCgroup"),
        ("admissionWebhook.networkPolicy.cidrs=10.0.0.1/32", "/admissionWebhook/networkPolicy"),
        ("admissionWebhook.networkPolicy.apiServerCIDRs[0]=apiserver", "/admissionWebhook/networkPolicy"),
    ],
)
def test_the_schema_refuses_unknown_keys_and_bad_paths(flag: str, message: str) -> None:
    done = helm("template", "tessera", str(CHART), "--kube-version", KUBE, "--set", flag)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def notes(tmp_path: Path, kube: str) -> str:
    """NOTES.txt as `helm install` prints it on Kubernetes `kube` (helm template renders no NOTES, so a copy
    of the chart carries it as an ordinary template)."""
    chart = tmp_path / f"chart-{kube}"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "zz-notes.yaml").write_text(
        "notes: |\n" + "".join(f"  {line}\n" for line in text.splitlines())
    )
    done = helm("template", "t", str(chart), "--kube-version", kube, "--show-only", "templates/zz-notes.yaml")
    assert done.returncode == 0, done.stderr
    return str(yaml.safe_load(done.stdout)["notes"])


@needs_helm
@pytest.mark.parametrize("kube", ["1.34.12", "1.35.4"])
def test_notes_on_a_release_without_sharing_name_the_gates_and_components(tmp_path: Path, kube: str) -> None:
    text = " ".join(notes(tmp_path, kube).split())
    assert f"This cluster runs Kubernetes v{kube}" in text
    assert (
        "DRAPartitionableDevices and DRAConsumableCapacity are on for kube-apiserver, kube-scheduler" in text
    )
    assert "every kubelet" in text and "whole GPUs only" in text and "DRADeviceTaints" in text


@needs_helm
@pytest.mark.parametrize("kube", ["1.36.3", "1.37.2"])
def test_notes_on_a_release_with_sharing_say_every_family_is_served(tmp_path: Path, kube: str) -> None:
    text = " ".join(notes(tmp_path, kube).split())
    assert f"Kubernetes v{kube} serves every family" in text and "DRAPartitionableDevices" not in text


@needs_helm
def test_the_install_step_keeps_the_same_library_and_replaces_another(tmp_path: Path) -> None:
    """The rendered init container's script, run by /bin/sh with its two mounts moved under tmp_path: the
    same bytes leave the host's file (its inode) alone, for runc may be bind-mounting it into a starting
    container; other bytes replace it by a rename, leaving no temp file."""
    (ds,) = by_kind(render(), "DaemonSet").values()
    (init,) = [c for c in ds["spec"]["template"]["spec"]["initContainers"] if c["name"] == "install-library"]
    image, host = tmp_path / "opt" / "tessera" / "lib", tmp_path / "host-lib"
    image.mkdir(parents=True)
    host.mkdir()
    script = init["args"][0].replace("/opt/tessera/lib", str(image)).replace("/host-lib", str(host))

    def install() -> None:
        done = subprocess.run([*init["command"], script], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr

    (image / "libtessera.so").write_bytes(b"\x7fELF one")
    install()
    assert (host / "libtessera.so").read_bytes() == b"\x7fELF one"
    inode = (host / "libtessera.so").stat().st_ino
    install()
    assert (host / "libtessera.so").stat().st_ino == inode
    (image / "libtessera.so").write_bytes(b"\x7fELF two")
    install()
    assert (host / "libtessera.so").read_bytes() == b"\x7fELF two"
    assert (host / "libtessera.so").stat().st_ino != inode
    assert sorted(p.name for p in host.iterdir()) == ["libtessera.so"]
