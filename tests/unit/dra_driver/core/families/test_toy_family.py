"""A fifth family is its own module and nothing else: a toy family, written into a copy of the product as one
new file, reaches every place that lists families (slices, device names, node settings and its own setting,
DeviceClasses, the config policy and decoder, planning, the claim's CDI spec, the node daemon's host parts)
without a change to any other product file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[5]

TOY_FAMILY = '''"""A toy family for a test: one `gpu-<i>-toy` device per GPU, exclusive, an env var in its
container."""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.vocabulary.container import ContainerEdits
from dra_driver.core.config_schema import ConfigField, ConfigKind
from dra_driver.core.families.base import Allocated, GpuOffer, NodeRecords, Json, NodeSetting, PlannedDevice
from dra_driver.core.families.protocol import DeviceFamily
from dra_driver.core.families.published import consumes, gpu_attributes
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import Gpu
from dra_driver.vocabulary.names import DeviceName, Family, gpu_device_name

NAME = Family("toy")


@dataclass(frozen=True, slots=True)
class ToyConfig:
    volume: int = 3


def _gpus(raw: object) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise ConfigError(f"toyGpus: expected a count of GPUs, got {raw!r}")
    return raw


GPUS = NodeSetting(key="toyGpus", default=1024, meaning="how many GPUs offer a toy", decode=_gpus)


class Toy(DeviceFamily[ToyConfig]):
    name = NAME
    rank = 9
    order_group = 9
    config = ConfigKind(
        kind="ToyConfig",
        family=NAME,
        type=ToyConfig,
        meaning="a toy",
        fields=(
            ConfigField(name="volume", attr="volume", meaning="how loud", default=3, minimum=0, maximum=11),
        ),
    )
    class_meaning = "a toy device, for a test."
    settings = (GPUS,)

    def parse_name(self, part: str) -> tuple[()] | None:
        return () if part == "toy" else None

    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        return (gpu_device_name(gpu.index, "toy"),)

    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        if o.gpu.index >= o.setting(GPUS):
            return ()
        name = gpu_device_name(o.gpu.index, "toy")
        device: Json = {"name": name, "attributes": gpu_attributes(o.gpu, o.inventory, NAME)}
        if o.counters is not None:
            device["consumesCounters"] = consumes(o.gpu, o.counters)
        return (device,)

    def plan(self, d: Allocated[ToyConfig], recorded: NodeRecords) -> PlannedDevice[ToyConfig, None]:
        return d.planned(NAME, None)

    def device_edits(self, d: PlannedDevice[ToyConfig, None], gpu: Gpu, made: None) -> ContainerEdits:
        return ContainerEdits(env=(f"TOY={d.config.volume}",))


FAMILY = Toy()
'''

PROBE = """
import json, sys
from pathlib import Path

import yaml

from cdi.edits import claim_spec
from dra_driver.backends.sim_node import decode_node
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core import families
from cdi.edits import HostLayout
from dra_driver.core.config import ConfigSource, OpaqueConfig, decode
from dra_driver.core.config_policy import render_policy
from dra_driver.core.device_classes import chart_families, manifests
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
import kubelet_plugin.host_parts  # the host parts' registry takes a family without a host part
from tests.support.claim_models import claim, result
from tests.support.family_plans import plan

raw = yaml.safe_load(Path(sys.argv[1]).read_text())
backend = SimulatedBackend(node=decode_node({**raw, "nodeName": "n1"}, default_name="n1"), state_file=None)
inventory = backend.inventory()
backend.close()
slices = build_slices(inventory, NodeSettings(node_name="n1"))
published = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
only_toy = build_slices(inventory, NodeSettings.from_mapping(
    {"apiVersion": "resource.tessera.dev/v1", "kind": "NodeSettings", "families": {"toy": True, "gpu": False,
     "vgpu": False, "mps": False, "mig": False}, "toyGpus": 3}, node_name="n1"))
p = plan(claim(result("gpu-1-toy")), inventory)
spec = claim_spec(plan=p, inventory=inventory, host=HostLayout(library_path="/lib/t.so", claim_dir="/c"))
def config(volume):
    params = {"apiVersion": "resource.tessera.dev/v1", "kind": "ToyConfig", "volume": volume}
    return decode(OpaqueConfig(source=ConfigSource.FROM_CLASS, requests=(), parameters=params, index=0))
toy_config = config(7)
try:
    config(12)
    too_loud = None
except Exception as e:
    too_loud = str(e)
print(json.dumps({
    "families": list(families.names()),
    "parsed": families.parse_device_name("gpu-3-toy").family.name,
    "published": [n for n in published if n.endswith("-toy")],
    "gpu0_counted_with_toy": any(
        d["name"] == "gpu-0-toy" and "consumesCounters" in d
        for s in slices
        for d in s["spec"].get("devices", [])
    ),
    "only_toy": [d["name"] for s in only_toy for d in s["spec"].get("devices", [])],
    "classes": sorted(manifests()),
    "chart": chart_families(),
    "policy_names_toy": "ToyConfig" in render_policy(),
    "config": repr(toy_config),
    "too_loud": too_loud,
    "planned": [d.family for d in p.devices],
    "env": [e for d in spec.devices for e in d.container_edits.env],
}))
"""


def test_a_toy_family_is_one_new_module(tmp_path: Path) -> None:
    for package in ("dra_driver", "cdi", "kubelet_plugin"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests" / "support", tmp_path / "tests" / "support")
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "dra_driver" / "core" / "families" / "toy.py").write_text(TOY_FAMILY)
    node_file = ROOT / "e2e" / "nodes" / "h100x8.yaml"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(node_file)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert "toy" in seen["families"]
    assert seen["parsed"] == "toy"
    assert seen["published"] == [f"gpu-{i}-toy" for i in range(8)]
    assert seen["gpu0_counted_with_toy"]  # it excludes the other families on its GPU through the counters
    # nodeGroups[].families knows it, and its own node setting (toyGpus: 3) is read from the settings file
    assert seen["only_toy"] == [f"gpu-{i}-toy" for i in range(3)]
    assert "toy.yaml" in seen["classes"] and "toy" in seen["chart"]
    assert seen["policy_names_toy"]
    assert "'volume': 7" in seen["config"] and "volume" in (seen["too_loud"] or "")
    assert seen["planned"] == ["toy"]
    assert seen["env"] == ["TOY=3"]  # the default volume, read as the family's own config type
