"""PCI topology from sysfs, read as the upstream deviceattribute helpers read it (backends/sysfs.py)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.backends.sysfs import PciPlace, near_nodes, numa_node_of, pci_place, pcie_root_of

HEX = "0123456789abcdef"
roots = st.tuples(st.text(HEX, min_size=4, max_size=4), st.text(HEX, min_size=2, max_size=2)).map(
    lambda t: f"pci{t[0]}:{t[1]}"
)
bdfs = st.tuples(st.text(HEX, min_size=2, max_size=2), st.text(HEX, min_size=2, max_size=2)).map(
    lambda t: f"0000:{t[0]}:{t[1]}.0"
)


@given(root=roots, bridges=st.lists(bdfs, max_size=4), bdf=bdfs)
def test_the_root_complex_is_the_first_directory_under_devices(
    root: str, bridges: list[str], bdf: str
) -> None:
    path = "/".join([root, *bridges, bdf])
    link_dir = "/sys/bus/pci/devices"
    assert pcie_root_of(f"../../../devices/{path}", link_dir, "/sys", bdf) == root
    assert pcie_root_of(f"/sys/devices/{path}", link_dir, "/sys", bdf) == root
    assert pcie_root_of(f"/host/sys/devices/{path}", "/host/sys/bus/pci/devices", "/host/sys", bdf) == root


@given(link=st.text(), bdf=bdfs)
def test_no_target_outside_devices_or_of_another_device_names_a_root(link: str, bdf: str) -> None:
    root = pcie_root_of(link, "/sys/bus/pci/devices", "/sys", bdf)
    assert root is None or (root.startswith("pci") and link.rstrip("/").endswith(bdf))
    assert pcie_root_of(f"../../../devices/platform/{bdf}", "/sys/bus/pci/devices", "/sys", bdf) is None
    assert pcie_root_of("../../../devices/pci0000:15/0000:99:00.0", "/sys/bus/pci/devices", "/sys", bdf) in (
        None,
        "pci0000:15",
    )


@given(node=st.integers(min_value=-1, max_value=4096), pad=st.sampled_from(["", "\n", " \n"]))
def test_numa_node_files(node: int, pad: str) -> None:
    assert numa_node_of(f"{node}{pad}") == (node if node >= 0 else None)


@given(text=st.text())
def test_a_numa_node_file_never_raises(text: str) -> None:
    got = numa_node_of(text)
    assert got is None or got >= 0


def test_nearest_nodes_of_the_same_socket_only() -> None:
    # 2 sockets of 4 nodes (AMD EPYC NPS4): 12 within the socket, 32 across
    row5 = "32 32 32 32 12 10 12 12"
    assert near_nodes(5, row5) == (4, 6, 7)
    assert near_nodes(0, "10 21") == ()  # another socket is never "near"
    assert near_nodes(0, "10") == ()
    assert near_nodes(0, "garbage") == ()


@given(row=st.lists(st.integers(min_value=10, max_value=255), min_size=1, max_size=16), data=st.data())
def test_near_nodes_are_other_nodes_at_the_smallest_distance(row: list[int], data: st.DataObject) -> None:
    node = data.draw(st.integers(min_value=0, max_value=len(row) - 1))
    near = near_nodes(node, " ".join(map(str, row)))
    assert node not in near
    assert len({row[n] for n in near}) <= 1 and all(row[n] < 20 for n in near)


def fake_sys(tmp_path: Path, bdf: str, root: str, numa: str | None) -> Path:
    sys = tmp_path / "sys"
    device = sys / "devices" / root / f"{root[3:]}:01.0" / bdf
    device.mkdir(parents=True)
    if numa is not None:
        (device / "numa_node").write_text(numa)
    (sys / "bus" / "pci" / "devices").mkdir(parents=True)
    os.symlink(f"../../../devices/{root}/{root[3:]}:01.0/{bdf}", sys / "bus" / "pci" / "devices" / bdf)
    node = sys / "devices" / "system" / "node" / "node1"
    node.mkdir(parents=True)
    (node / "distance").write_text("12 10 32\n")
    return sys


def test_a_gpu_in_a_sysfs_tree(tmp_path: Path) -> None:
    sys = fake_sys(tmp_path, "0000:9a:00.0", "pci0000:97", "1\n")
    assert pci_place(sys, "00000000:9A:00.0") == PciPlace("pci0000:97", 1, (0,))


def test_no_numa_affinity_and_no_entry(tmp_path: Path) -> None:
    sys = fake_sys(tmp_path, "0000:18:00.0", "pci0000:15", "-1\n")
    assert pci_place(sys, "00000000:18:00.0") == PciPlace("pci0000:15", None, ())
    assert pci_place(sys, "00000000:2A:00.0") == PciPlace()  # not in sysfs (a container without /sys)
    assert pci_place(tmp_path / "nowhere", "00000000:18:00.0") == PciPlace()
