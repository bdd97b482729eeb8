"""The `tessera` invocations the documentation shows that need no API server, each run as a user runs it (the
console script, small real inputs), in seconds (tests/README.md, "Smoke forms"). Those that need one are in
e2e/scenarios/controlplane/test_command_smoke.py (the make targets in e2e/scenarios/own_plane/); the output
streams of every subcommand in test_command_streams.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.driver_root import install_driver
from tests.support.smoke import REPO, covers

TESSERA = Path(sys.executable).with_name("tessera")
NODE = REPO / "e2e" / "nodes" / "h100x8.yaml"
HAMI = REPO / "admission" / "examples"
UID = "5d1c2b3a-0000-4000-8000-00000000c1ea"


def tessera(*args: str, code: int = 0) -> str:
    done = subprocess.run(
        [str(TESSERA), *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == code, f"tessera {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


@covers("tessera --help")
def test_help_names_every_subcommand() -> None:
    out = tessera("--help")
    assert all(
        name in out for name in ("inventory", "plugin", "cleanup", "convert", "webhook", "explain", "sim")
    )


@covers("tessera inventory", "tessera convert --slices slices.yaml deploy/inference.yaml")
def test_convert_takes_the_products_from_slices_it_is_given(tmp_path: Path) -> None:
    """docs/migration-from-hami.md: the slices a cluster publishes (here: what `tessera inventory` prints for
    an 8 x H100 node) decide which products a HAMi card type may match."""
    slices = tmp_path / "slices.yaml"
    slices.write_text(tessera("inventory", "--simulate", str(NODE), "-o", "yaml"))
    out = list(
        yaml.safe_load_all(tessera("convert", "--slices", str(slices), str(HAMI / "hami-default-use.yaml")))
    )
    kinds = [d["kind"] for d in out if d]
    assert kinds[0] == "ResourceClaimTemplate" and "Pod" in kinds


@covers("tessera explain POD.yaml")
def test_explain_a_hami_pod_file_on_a_simulated_node() -> None:
    out = tessera("explain", str(HAMI / "hami-default-use.yaml"), "--simulate", str(NODE))
    assert "Pod/gpu-pod container ubuntu-container" in out and "can be allocated" in out


@covers("tessera explain --simulate")
def test_explain_a_simulated_node_with_its_groups_settings(tmp_path: Path) -> None:
    """docs/scheduling.md: `--settings` gives a simulated node its group's settings, read as `tessera
    inventory --settings` reads them; the published vgpu device then says 2 shares."""
    settings = tmp_path / "settings.yaml"
    settings.write_text("apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nsharesPerGpu: 2\n")
    listed = json.loads(
        tessera("inventory", "--simulate", str(NODE), "--settings", str(settings), "-o", "json")
    )
    shares = {
        d["capacity"]["shares"]["value"]
        for s in listed["items"]
        for d in s["spec"].get("devices", [])
        if d["name"].endswith("-vgpu")
    }
    assert shares == {"2"}
    out = tessera(
        "explain", str(HAMI / "hami-default-use.yaml"), "--simulate", str(NODE), "--settings", str(settings)
    )
    assert "can be allocated" in out


def _tainted(state: Path) -> set[str]:
    listed: dict[str, Any] = json.loads(
        tessera("inventory", "--simulate", str(NODE), "--state-file", str(state), "-o", "json")
    )
    return {
        d["name"]
        for s in listed["items"]
        for d in s["spec"].get("devices", [])
        if any(t["key"] == "gpu.tessera.dev/unhealthy" for t in d.get("taints", []))
    }


@covers(
    "tessera sim inject --node-file e2e/nodes/h100x8.yaml --state-file <root>/sim-state.json "
    "--gpu 2 --xid 79",
    "tessera sim inject ... --gpu 2 --ecc-dbe",
    "tessera sim inject --lost",
    "tessera sim inject ... --gpu 2 --clear",
)
def test_injected_faults_taint_the_gpus_devices_until_cleared(tmp_path: Path) -> None:
    """docs/metrics.md: a fault injected into a simulated node's state file taints its GPU's devices in what
    the node would publish; --clear is the GPU's reset."""
    state = tmp_path / "sim-state.json"
    sim = ["sim", "inject", "--node-file", str(NODE), "--state-file", str(state)]
    assert tessera(*sim, "--gpu", "2", "--xid", "79").startswith("GPU 2 (")
    tessera(*sim, "--gpu", "3", "--ecc-dbe")
    tessera(*sim, "--gpu", "4", "--lost")
    tainted = _tainted(state)
    assert {"gpu-2", "gpu-3", "gpu-4", "gpu-2-vgpu"} <= tainted
    assert not any(name.startswith(("gpu-0", "gpu-1")) for name in tainted)
    assert "1 fault(s) cleared" in tessera(*sim, "--gpu", "2", "--clear")


@covers(
    "tessera cleanup --once",
    "tessera cleanup --once --node-name <node> --root /host --driver-root / --driver-root-mount /host",
)
def test_cleanup_once_removes_what_a_node_holds_of_tesseras(tmp_path: Path) -> None:
    """docs/install.md, "Uninstalling": the command a node's administrator runs after `helm uninstall`."""
    root = tmp_path / "host"
    claim_dir = root / "var/lib/tessera/claims" / UID
    claim_dir.mkdir(parents=True)
    spec = root / "var/run/cdi" / f"k8s.gpu.tessera.dev-claim_{UID}.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("{}")
    driver = tmp_path / "driver"
    install_driver(driver)
    args = ["cleanup", "--once", "--node-name", "n1", "--root", str(root)]
    args += ["--driver-root", str(driver), "--driver-root-mount", str(driver)]
    args += ["--simulate", str(NODE), "--sim-state", str(tmp_path / "sim.json")]
    removed = tessera(*args).splitlines()
    assert f"cdi-spec {spec}" in removed and f"claim-dir {claim_dir}" in removed
    assert not spec.exists() and not claim_dir.exists()


@covers("tessera convert FILE…")
def test_convert_every_shipped_example() -> None:
    """README.md: `tessera convert FILE…` on admission/examples/ (the webhook's own examples, and NVIDIA DRA
    claims in nvidia/: docs/migration-from-nvidia-dra.md), at once."""
    examples = sorted(HAMI.rglob("*.yaml"))
    docs = [d for d in yaml.safe_load_all(tessera("convert", *map(str, examples))) if d]
    names = {d["metadata"]["name"] for d in docs if d["kind"] != "ResourceClaimTemplate"}
    assert len(names) >= len(examples) and all("kind" in d for d in docs)
    classes = {
        r["exactly"]["deviceClassName"]
        for d in docs
        if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
        for r in (d["spec"].get("spec") or d["spec"])["devices"]["requests"]
        if "exactly" in r
    }
    assert classes and all(c.endswith(".tessera.dev") for c in classes), classes


@covers("tessera inventory --settings")
def test_inventory_refuses_an_oversubscription_the_simulated_host_cannot_back(tmp_path: Path) -> None:
    """docs/gpu-sharing.md, "Oversubscription": the node's settings are refused as the node daemon refuses
    them, naming the field and the highest ratio the host backs."""
    node = tmp_path / "node.yaml"
    node.write_text(
        "apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\nhostMemoryGiB: 64\n"
        "gpus: [{product: H100-80GB-SXM, count: 2}]\n"
    )
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nmemoryOversubscription: 2\n"
    )
    done = subprocess.run(
        [str(TESSERA), "inventory", "--simulate", str(node), "--settings", str(settings)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and not done.stdout
    assert "memoryOversubscription: 2 publishes 159.3Gi" in done.stderr
    assert "set memoryOversubscription to at most 1.3 in this node group's settings" in done.stderr
    settings.write_text(
        "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nmemoryOversubscription: 1.3\n"
    )
    assert "virtualMemory" in tessera(
        "inventory", "--simulate", str(node), "--settings", str(settings), "-o", "json"
    )
