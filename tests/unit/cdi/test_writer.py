from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from cdi.spec import Device, Spec
from cdi.writer import list_specs, read_spec, remove_spec, stale_temp_files, write_spec
from dra_driver.io.files import atomic_write
from dra_driver.vocabulary.container import ContainerEdits
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.names import ClaimUID, cdi_spec_file_name

SPEC = Spec(
    kind="k8s.gpu.tessera.dev/claim",
    devices=(Device(name="u-gpu-0", container_edits=ContainerEdits(env=("A=1",))),),
)


def disk_full() -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_write_read_remove(tmp_path: Path) -> None:
    path = write_spec(tmp_path / "cdi", ClaimUID("u1"), SPEC)
    assert path.name == cdi_spec_file_name(ClaimUID("u1"))
    assert read_spec(path) == SPEC
    assert json.loads(path.read_text())["cdiVersion"] == "0.6.0"
    assert [(u, p.name) for u, p in list_specs(tmp_path / "cdi")] == [("u1", path.name)]
    assert remove_spec(tmp_path / "cdi", ClaimUID("u1"))
    assert not remove_spec(tmp_path / "cdi", ClaimUID("u1"))
    assert list(list_specs(tmp_path / "cdi")) == []


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as info:
        write_spec(tmp_path, ClaimUID("u1"), SPEC, fault=disk_full)
    assert "No space left on device" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_a_failed_rewrite_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "f"
    atomic_write(target, b"old")
    with pytest.raises(StorageError):
        atomic_write(target, b"new content", fault=disk_full)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_other_vendors_files_are_not_ours(tmp_path: Path) -> None:
    (tmp_path / "nvidia.com-gpu.json").write_text("{}")
    (tmp_path / f".{cdi_spec_file_name(ClaimUID('u2'))}.tmp-1234").write_text("partial")
    write_spec(tmp_path, ClaimUID("u3"), SPEC)
    assert [u for u, _ in list_specs(tmp_path)] == ["u3"]
    assert [p.name for p in stale_temp_files(tmp_path)] == [f".{cdi_spec_file_name(ClaimUID('u2'))}.tmp-1234"]


def test_file_mode(tmp_path: Path) -> None:
    atomic_write(tmp_path / "x", b"1", mode=0o600)
    assert (tmp_path / "x").stat().st_mode & 0o777 == 0o600


def test_anything_under_our_spec_name_is_replaced_never_followed(tmp_path: Path) -> None:
    cdi = tmp_path / "cdi"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    path = cdi / cdi_spec_file_name(ClaimUID("u1"))
    (path / "deep" / "er").mkdir(parents=True)  # a directory named like our spec
    assert write_spec(cdi, ClaimUID("u1"), SPEC) == path and read_spec(path) == SPEC
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(StorageError, match="is a symbolic link"):
        read_spec(path)
    assert remove_spec(cdi, ClaimUID("u1")) and not os.path.lexists(path)
    assert (victim / "keep").exists()


def test_reading_a_spec_never_blocks_and_never_reads_unbounded(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening a FIFO for reading would wait for a writer
    with pytest.raises(StorageError, match="not a regular file"):
        read_spec(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(StorageError, match="more than"):
        read_spec(big)
    for content in (b"[]", b"{garbage", b"[" * 100_000, b'{"kind": "k8s.gpu.tessera.dev/claim"}'):
        (tmp_path / "bad.json").write_bytes(content)
        with pytest.raises(StorageError, match=r"bad\.json"):
            read_spec(tmp_path / "bad.json")


def test_annotations_round_trip(tmp_path: Path) -> None:
    marked = Spec(kind=SPEC.kind, devices=SPEC.devices, annotations={"gpu.tessera.dev/x": "{}"})
    path = write_spec(tmp_path, ClaimUID("u1"), marked)
    assert read_spec(path) == marked
    assert json.loads(path.read_text())["annotations"] == {"gpu.tessera.dev/x": "{}"}
    assert path.stat().st_mode & 0o777 == 0o644
