"""The GPU's view holds as many claims as the node lets the scheduler place on one GPU (issue #34, defect 6).

One number ties them: the entries of the C library's view (interceptor/src/view.h, TV_MAX_SLOTS, printed by
interceptor/build/tests/tlayout), the daemon's (`MAX_SLOTS`), the most `vgpuShares` may be and the `shares`
capacity the node then publishes per GPU. Before, `vgpuShares` went to 128 with a 64-entry view: claims 65 to
70 on a GPU were prepared without error and had no part of the frame.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dra_driver.core.families import vgpu as vgpu_family
from dra_driver.core.families.capacity import MAX_SHARES
from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.core.slices import build_slices
from dra_driver.libtessera.view_layout import MAX_SLOTS, SLOT, SLOTS_OFFSET, VIEW_SIZE
from dra_driver.vocabulary.errors import ConfigError
from kubelet_plugin.library_files.gpu_view import GpuView
from tests.support.doubles.interceptor_programs import TLAYOUT
from tests.support.inventories import make_gpu, make_inventory
from tests.support.plugin_process import REPO, PluginProcess, cleanup, short_root
from tests.support.prepare_env import Env, claim, vgpu
from tests.support.slice_checks import devices

pytestmark = pytest.mark.timeout(300)

CHART_SCHEMA = REPO / "deploy" / "helm" / "tessera" / "values.schema.json"


def c_view_slots() -> int:
    out = subprocess.run([str(TLAYOUT)], capture_output=True, text=True, check=True, timeout=30).stdout
    found = re.search(r"^view slots (\d+)$", out, re.MULTILINE)
    assert found, out
    return int(found.group(1))


def published_shares(vgpu_shares: int) -> int:
    inventory = make_inventory(make_gpu(0, "H100-80GB-SXM"))
    settings = NodeSettings(node_name="node-a", family=family_settings(vgpuShares=vgpu_shares))
    (device,) = (d for d in devices(build_slices(inventory, settings)) if d["name"] == "gpu-0-vgpu")
    return int(device["capacity"]["shares"]["value"])


def test_the_most_shares_a_node_publishes_per_gpu_is_what_the_view_holds_on_both_sides() -> None:
    chart_max = json.loads(CHART_SCHEMA.read_text())["properties"]["nodeGroups"]["items"]["properties"][
        "vgpuShares"
    ]["maximum"]
    assert c_view_slots() == MAX_SLOTS == MAX_SHARES == chart_max == published_shares(MAX_SHARES)
    assert SLOTS_OFFSET + SLOT.size * MAX_SLOTS == VIEW_SIZE
    with pytest.raises(
        ConfigError, match=rf"vgpuShares: {MAX_SLOTS + 1} is out of range; use 1\.\.{MAX_SLOTS}"
    ):
        family_settings(vgpuShares=MAX_SLOTS + 1)


def test_a_gpu_full_of_claims_has_every_claim_in_its_view_and_refuses_one_more(tmp_path: Path) -> None:
    env = Env.create(tmp_path)
    # cores 1 each: every claim reserves its own part (64 % of the frame), the strictest case for the view
    refs = env.put(*(claim(f"c{i}", vgpu(0, memory="256Mi", cores="1")) for i in range(MAX_SLOTS)))
    preparer = env.preparer()
    answers = preparer.prepare(refs)
    assert [a.error for a in answers.values()] == [None] * MAX_SLOTS
    slots = {r.slot for e in env.checkpoint().claims.values() for r in e.family_records(vgpu_family.FAMILY)}
    gpu = env.inventory().gpus[0]
    view = GpuView(env.paths.gpus_dir / gpu.uuid / "view")
    try:
        _, parts = view.read_schedule()
    finally:
        view.close()
    assert len(slots) == MAX_SLOTS
    assert {p.slot for p in parts} == slots  # every claim has its part of the frame
    # one more than the view holds (a scheduler told more shares than the node publishes): refused
    (extra,) = env.put(claim("one-too-many", vgpu(0, memory="256Mi", cores="0")))
    (answer,) = preparer.prepare([extra]).values()
    assert answer.error is not None and f"already holds {MAX_SLOTS} vgpu claims" in str(answer.error)


def test_a_node_setting_of_70_shares_is_refused_naming_the_field_the_value_and_the_bound() -> None:
    root = short_root()
    settings = root / "settings.yaml"
    settings.write_text("apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nvgpuShares: 70\n")
    p = PluginProcess(root=root, extra_args=("--settings", str(settings)))
    try:
        p.start(wait=False)
        assert p.wait_exit(timeout=30) != 0
        assert f"vgpuShares: 70 is out of range; use 1..{MAX_SLOTS}" in p.log()
    finally:
        cleanup([p], root)
