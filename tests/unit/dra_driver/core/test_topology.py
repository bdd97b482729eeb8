"""Topology attributes (docs/topology.md): pcieRoot and numaNode on every device of every family, in the form
the settings ask for; the NVLink domain and fabric on whole GPUs only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dra_driver.core.families.published import (
    NumaForm,
    has_numa_list,
    numa_list_unkept,
    nvlink_domain,
    scalar_numa,
)
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import NO_NVLINK, Fabric, Gpu, Inventory, NvLinks
from dra_driver.vocabulary.names import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE, Attr, qualified
from tests.support.inventories import make_gpu, make_inventory
from tests.support.slice_checks import devices

NVLINK = qualified(Attr.NVLINK_DOMAIN)
CLUSTER = "2b6d5c3a-0f1e-4d2c-9b8a-7766554433aa"


def placed(index: int, *, root: str, numa: int | None, links: NvLinks = NO_NVLINK, **kw: object) -> Gpu:
    gpu = make_gpu(index, "H100-80GB-SXM", **kw)  # type: ignore[arg-type]
    return replace(gpu, pcie_root=root, numa_node=numa, nvlinks=links)


def published(inventory: Inventory, settings: NodeSettings | None = None) -> dict[str, dict[str, object]]:
    slices = build_slices(inventory, settings or NodeSettings(node_name="n"))
    return {str(d["name"]): d["attributes"] for d in devices(slices)}


def test_every_device_of_every_family_sits_where_its_gpu_sits() -> None:
    inv = make_inventory(
        placed(0, root="pci0000:15", numa=0, links=NvLinks(switch=True)),
        placed(
            1,
            root="pci0000:55",
            numa=1,
            links=NvLinks(switch=True),
            mig_enabled=True,
            instances=(("3g.40gb", 0),),
        ),
    )
    attrs = published(inv)
    families = {str(a[qualified(Attr.TYPE)]["string"]) for a in attrs.values()}  # type: ignore[index]
    assert families == {"gpu", "vgpu", "mps", "mig"}
    for name, a in attrs.items():
        gpu = 0 if name.startswith("gpu-0") else 1
        assert a[PCIE_ROOT_ATTRIBUTE] == {"string": ["pci0000:15", "pci0000:55"][gpu]}, name
        assert a[NUMA_NODE_ATTRIBUTE] == {"int": gpu}, name
        whole = a[qualified(Attr.TYPE)] == {"string": "gpu"}
        assert (NVLINK in a) == whole, name  # MIG instances (static ones too), vgpu, MPS: no NVLink domain
    assert attrs["gpu-0"][NVLINK] == {"string": "nvswitch"}
    assert any(n.startswith("gpu-1-mig-3g40gb-0") for n in attrs)  # the administrator's instance


def test_the_list_form_of_numa_node_names_the_nearest_nodes_too() -> None:
    gpu = replace(placed(0, root="pci0000:15", numa=5), numa_near=(4, 6, 7))
    attrs = published(make_inventory(gpu), NodeSettings(node_name="n", numa_node_form=NumaForm.LIST))
    assert {str(a[NUMA_NODE_ATTRIBUTE]) for a in attrs.values()} == {str({"ints": [5, 4, 6, 7]})}


def test_the_scalar_fallback_of_the_list_form_is_the_scalar_form() -> None:
    # What the publisher writes once the API server drops the list: the default setting's slices, exactly.
    gpus = [replace(placed(i, root="pci0000:15", numa=i // 2), numa_near=(1 - i // 2,)) for i in range(4)]
    inv = make_inventory(*gpus)
    listed = build_slices(inv, NodeSettings(node_name="n", numa_node_form=NumaForm.LIST))
    scalar = build_slices(inv, NodeSettings(node_name="n"))
    assert has_numa_list(listed) and not has_numa_list(scalar)
    assert scalar_numa(listed) == scalar
    assert scalar_numa(scalar) == scalar
    assert has_numa_list(listed)  # the slices it was given are left as they were


def test_only_answers_that_name_numa_node_mean_the_list_was_not_kept() -> None:
    refused = (
        'ResourceSlice "n-gpu-1" is invalid: [spec.devices[0].attributes[resource.kubernetes.io/numaNode]: '
        'Invalid value: "": must specify one of: `int`, `bool`, `string`, `version`, `ints`, …]'
    )
    assert numa_list_unkept([refused])
    assert numa_list_unkept(["n-gpu-1: spec.devices[3].attributes.resource.kubernetes.io/numaNode"])
    assert not numa_list_unkept(["n-gpu-1: spec.sharedCounters", "n-gpu-1: spec.devices[0].taints"])
    assert not numa_list_unkept([])


def test_a_gpu_the_node_says_nothing_about_publishes_what_it_did_before() -> None:
    bare = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "L4"))
    placed_nowhere = make_inventory(*(replace(g, numa_node=None, pcie_root=None) for g in bare.gpus))
    settings = NodeSettings(node_name="n", numa_node_form=NumaForm.LIST)
    assert build_slices(bare, settings) == build_slices(placed_nowhere, NodeSettings(node_name="n"))
    for a in published(bare).values():
        assert not {PCIE_ROOT_ATTRIBUTE, NUMA_NODE_ATTRIBUTE, NVLINK} & set(a)


def test_nvlink_domains_bridged_pairs_switches_and_fabric_cliques() -> None:
    pair = [placed(i, root="pci0000:16", numa=0, links=NvLinks(peers=(1 - i,))) for i in (0, 1)]
    ring = [
        placed(i, root="pci0000:96", numa=1, links=NvLinks(peers=((i - 1) % 4 + 2, (i + 1) % 4 + 2)))
        for i in (2, 3, 4, 5)
    ]
    alone = placed(6, root="pci0000:a0", numa=1)
    stray = placed(7, root="pci0000:a0", numa=1, links=NvLinks(peers=(9,)))  # a peer NVML does not list
    inv = make_inventory(*pair, *ring, alone, stray)
    assert [nvlink_domain(g, inv) for g in inv.gpus] == [
        "gpus-0-1",
        "gpus-0-1",
        *["gpus-2-3-4-5"] * 4,
        None,
        "gpus-7",
    ]
    fabric = replace(
        placed(0, root="pci0000:15", numa=0, links=NvLinks(switch=True)), fabric=Fabric(CLUSTER, 7)
    )
    assert nvlink_domain(fabric, make_inventory(fabric)) == f"{CLUSTER}.7"
    attrs = published(make_inventory(fabric))["gpu-0"]
    assert attrs[qualified(Attr.FABRIC_CLUSTER_UUID)] == {"string": CLUSTER}
    assert attrs[qualified(Attr.FABRIC_CLIQUE_ID)] == {"int": 7}
    assert len(str(attrs[NVLINK]["string"])) <= 64  # type: ignore[index]


def test_settings_read_the_numa_node_form() -> None:
    header = {"apiVersion": "resource.tessera.dev/v1", "kind": "NodeSettings"}
    assert NodeSettings.from_mapping(header, node_name="n").numa_node_form is NumaForm.SCALAR
    listed = NodeSettings.from_mapping({**header, "numaNodeForm": "list"}, node_name="n")
    assert listed.numa_node_form is NumaForm.LIST
    with pytest.raises(ConfigError, match="numaNodeForm: 'lists' is not one of scalar, list"):
        NodeSettings.from_mapping({**header, "numaNodeForm": "lists"}, node_name="n")
