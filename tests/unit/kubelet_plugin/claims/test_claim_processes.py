"""The /proc parsers behind the per-process `container` label, and the scan over a /proc tree laid out in a
temporary directory (fd links, fdinfo, status, cgroup as the kernel writes them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.libtessera.region_layout import MAX_PROCS, SLOT_LOCK_BASE
from kubelet_plugin.claims.claim_processes import (
    ClaimProcess,
    ProcessTable,
    by_slot,
    container_id,
    locked_slots,
    names_a_region,
    namespaced_pid,
    region_key,
    scan,
    start_time,
)

A = "a" * 56 + "0123abcd"
B = "f" * 64
POD = "kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice"
hex_ids = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2, systemd driver: containerd, CRI-O, docker
        (f"0::/kubepods.slice/kubepods-burstable.slice/{POD}/cri-containerd-{A}.scope\n", A),
        (f"0::/kubepods.slice/kubepods-besteffort.slice/{POD}/crio-{A}.scope\n", A),
        (f"0::/system.slice/docker-{A}.scope\n", A),
        # cgroup v2, cgroupfs driver
        (f"0::/kubepods/burstable/pod1b2c3d4e-5f60/{A}\n", A),
        # cgroup v1: the first hierarchy naming a container
        (
            f"12:pids:/kubepods/besteffort/pod1b2c3d4e/{A}\n11:memory:/kubepods/besteffort/pod1b2c3d4e/{A}\n",
            A,
        ),
        (f"4:cpu,cpuacct:/docker/{A}\n1:name=systemd:/docker/{A}\n", A),
        (f"1:name=systemd:/\n3:memory:/kubepods.slice/{POD}/cri-containerd-{A}.scope\n", A),
        # hybrid: the unified line wins over the v1 ones
        (f"3:memory:/docker/{B}\n0::/kubepods/pod1/{A}\n", A),
        # no container: a host process, a cgroup namespace's root, a pod's slice, a short or upper-case ID
        ("0::/\n", ""),
        ("0::/user.slice/user-1000.slice/session-2.scope\n", ""),
        (f"0::/kubepods.slice/{POD}\n", ""),
        ("0::/docker/0123abcd\n", ""),
        (f"0::/docker/{A.upper()}\n", ""),
        (f"0::/docker/{A}x\n", ""),
        ("", ""),
        ("garbage without colons\n", ""),
    ],
)
def test_container_id_from_cgroup(text: str, expected: str) -> None:
    assert container_id(text) == expected


@given(cid=hex_ids, prefix=st.sampled_from(["cri-containerd-", "crio-", "docker-", ""]), v2=st.booleans())
def test_any_runtimes_id_is_found_whole(cid: str, prefix: str, v2: bool) -> None:
    leaf = f"{prefix}{cid}.scope" if prefix else cid
    line = f"0::/kubepods/pod1/{leaf}" if v2 else f"7:devices:/kubepods/pod1/{leaf}"
    assert container_id(f"1:name=systemd:/\n{line}\n") == cid


@given(st.text())
def test_container_id_never_fails_and_is_64_hex_or_empty(text: str) -> None:
    found = container_id(text)
    assert found == "" or (len(found) == 64 and all(c in "0123456789abcdef" for c in found))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Name:\tpython\nNSpid:\t4242\t1\nNSpgid:\t4242\t1\n", 1),  # in a pid namespace
        ("NSpid:\t4242\t17\t1\n", 1),  # nested namespaces: the innermost
        ("NSpid:\t4242\n", 4242),  # no namespace of its own
        ("Name:\tpython\nPid:\t4242\n", None),  # a kernel without NSpid
        ("NSpid:\n", None),
        ("NSpid:\tx\n", None),
    ],
)
def test_namespaced_pid(text: str, expected: int | None) -> None:
    assert namespaced_pid(text) == expected


@given(st.lists(st.integers(1, 2**22), min_size=1, max_size=4))
def test_namespaced_pid_is_the_last_field(pids: list[int]) -> None:
    assert namespaced_pid("Tgid:\t9\nNSpid:\t" + "\t".join(map(str, pids)) + "\nNSsid:\t1\n") == pids[-1]


def _lock(start: int, end: int | None = None) -> str:
    return f"lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:9978052 {start} {start if end is None else end}\n"


def test_locked_slots_are_one_byte_locks_past_the_base() -> None:
    info = "pos:\t0\nflags:\t02100002\n" + _lock(SLOT_LOCK_BASE + 5) + _lock(SLOT_LOCK_BASE + 9)
    assert locked_slots(info) == (5, 9)
    # the creation lock (a whole-file flock), ranges, slots past the region's: none of them a slot
    assert locked_slots("lock:\t1: FLOCK  ADVISORY  WRITE 77 fe:00:1 0 EOF\n") == ()
    assert locked_slots(_lock(SLOT_LOCK_BASE, SLOT_LOCK_BASE + 3)) == ()
    assert locked_slots(_lock(SLOT_LOCK_BASE + MAX_PROCS) + _lock(SLOT_LOCK_BASE - 1)) == ()
    assert locked_slots("pos:\t0\n") == ()


@given(st.lists(st.integers(0, MAX_PROCS - 1), max_size=8))
def test_locked_slots_round_trip(slots: list[int]) -> None:
    assert locked_slots("pos:\t0\n" + "".join(_lock(SLOT_LOCK_BASE + s) for s in slots)) == tuple(slots)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/var/run/tessera/claims/0b6c1f0e-1111-2222-3333-444455556666/region", True),  # the container's
        ("/var/lib/tessera/claims/0b6c1f0e-1111-2222-3333-444455556666/shared/region", True),  # the host's
        ("/var/run/tessera/claims/u/region (deleted)", False),
        ("/var/run/tessera/claims/u/limits", False),
        ("/tmp/myregion", False),
        ("socket:[12345]", False),
        ("anon_inode:[eventfd]", False),
    ],
)
def test_names_a_region(target: str, expected: bool) -> None:
    assert names_a_region(target) is expected


def _process(
    proc: Path, host_pid: int, *, ns_pid: int, cgroup: str, fds: dict[int, tuple[Path, str]]
) -> None:
    """A /proc/<host_pid> entry: each fd a link to a file with the fdinfo given."""
    d = proc / str(host_pid)
    (d / "fd").mkdir(parents=True)
    (d / "fdinfo").mkdir()
    (d / "status").write_text(f"Name:\ttcuda\nNSpid:\t{host_pid}\t{ns_pid}\n")
    (d / "stat").write_text(f"{host_pid} (a) b) S 1 {' '.join(['0'] * 17)} {host_pid * 10} 0\n")
    (d / "cgroup").write_text(cgroup)
    for fd, (target, info) in fds.items():
        (d / "fd" / str(fd)).symlink_to(target)
        (d / "fdinfo" / str(fd)).write_text("pos:\t0\n" + info)


def test_scan_finds_each_regions_holders_with_their_slots_pids_and_containers(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    claims = tmp_path / "claims"
    one, two = claims / "u1" / "shared" / "region", claims / "u2" / "shared" / "region"
    for r in (one, two):
        r.parent.mkdir(parents=True)
        r.write_bytes(b"r")
    forged = tmp_path / "tenant" / "var" / "run" / "tessera" / "claims" / "u1" / "region"
    forged.parent.mkdir(parents=True)
    forged.write_bytes(b"f")
    cg = "0::/kubepods/pod1/{}\n"
    _process(proc, 101, ns_pid=1, cgroup=cg.format(A), fds={3: (one, _lock(SLOT_LOCK_BASE + 0))})
    _process(proc, 102, ns_pid=1, cgroup=cg.format(B), fds={5: (one, _lock(SLOT_LOCK_BASE + 1))})
    _process(proc, 103, ns_pid=7, cgroup="0::/\n", fds={4: (two, _lock(SLOT_LOCK_BASE + 2))})
    # a file named like claim u1's region that is not it, and a process holding no region
    _process(proc, 104, ns_pid=1, cgroup=cg.format(B), fds={3: (forged, _lock(SLOT_LOCK_BASE + 3))})
    _process(proc, 105, ns_pid=9, cgroup=cg.format(B), fds={0: (tmp_path, "")})
    (proc / "self").symlink_to(proc / "105")
    (proc / "106").mkdir()  # gone meanwhile: nothing readable
    (proc / "meminfo").write_text("MemTotal: 1 kB\n")

    found = scan(proc=proc)

    k1, k2, kf = region_key(one), region_key(two), region_key(forged)
    assert k1 is not None and k2 is not None and kf is not None
    assert by_slot(found[k1]) == {
        0: ClaimProcess(101, 1, A, (0,), "3", "1010"),
        1: ClaimProcess(102, 1, B, (1,), "5", "1020"),
    }
    assert by_slot(found[k2]) == {2: ClaimProcess(103, 7, "", (2,), "4", "1030")}
    assert {p.host_pid for ps in found.values() for p in ps} == {101, 102, 103, 104}
    assert [p.host_pid for p in found[kf]] == [104]  # the forged file's holder is not claim u1's


def test_scan_is_bounded_and_quiet_about_what_it_cannot_read(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    region = tmp_path / "c" / "shared" / "region"
    region.parent.mkdir(parents=True)
    region.write_bytes(b"r")
    many = {fd: (region, _lock(SLOT_LOCK_BASE + fd)) for fd in range(10)}
    _process(proc, 200, ns_pid=3, cgroup=f"0::/docker/{A}\n", fds=many)
    key = region_key(region)
    assert key is not None
    assert len(scan(proc=proc, max_fds=4)[key][0].slots) == 4
    assert scan(proc=proc, max_processes=0) == {}
    assert scan(proc=tmp_path / "no-proc") == {}
    assert region_key(tmp_path / "absent") is None
    if os.geteuid() != 0:  # root reads it anyway
        os.chmod(proc / "200" / "fd", 0)
        try:
            assert scan(proc=proc) == {}
        finally:
            os.chmod(proc / "200" / "fd", 0o755)


def test_start_time_is_field_22_whatever_the_command() -> None:
    assert start_time("42 (x) y) z) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 100 5\n") == "98765"
    assert start_time("42 (short) S 1\n") == ""
    assert start_time("") == ""


def test_the_table_checks_remembered_holders_and_scans_again_only_when_one_fails(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    region = tmp_path / "c" / "shared" / "region"
    region.parent.mkdir(parents=True)
    region.write_bytes(b"r")
    _process(proc, 301, ns_pid=1, cgroup=f"0::/docker/{A}\n", fds={3: (region, _lock(SLOT_LOCK_BASE + 0))})
    _process(proc, 302, ns_pid=1, cgroup=f"0::/docker/{B}\n", fds={3: (region, _lock(SLOT_LOCK_BASE + 1))})
    table = ProcessTable(proc=proc)

    def containers(live: list[int]) -> dict[int, str]:
        table.new_scrape()
        return {s: p.container for s, p in table.holders(region, live).items()}

    assert containers([0, 1]) == {0: A, 1: B}
    assert containers([0, 1]) == {0: A, 1: B}
    assert table.full_scans == 1  # the second scrape only checked the two holders
    # 302 exits and its pid goes to a process of another container holding slot 1 (new start time)
    shutil.rmtree(proc / "302")
    _process(proc, 302, ns_pid=1, cgroup=f"0::/docker/{A}\n", fds={3: (region, _lock(SLOT_LOCK_BASE + 1))})
    (proc / "302" / "stat").write_text((proc / "302" / "stat").read_text().replace(" 3020 ", " 3021 "))
    assert containers([0, 1]) == {0: A, 1: A}
    assert table.full_scans == 2
    # a slot nobody is seen holding: one full scan per scrape at most, the slot has no holder
    assert containers([0, 1, 7]) == {0: A, 1: A}
    assert table.full_scans == 3
    assert containers([]) == {}
    assert table.holders(tmp_path / "absent", [0]) == {}
    assert table.full_scans == 3
