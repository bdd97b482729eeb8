from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from dra_driver.errors import StorageError
from dra_driver.names import ClaimUID
from kubelet_plugin.claimdir import ClaimDirs


def test_write_rewrite_remove(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path / "claims")
    path = dirs.write(ClaimUID("u1"), limits="version 1\n")
    # the daemon creates both files the library needs, so containers need no write access to the dir
    assert sorted(os.listdir(path)) == ["limits", "region"]
    assert path.stat().st_mode & 0o7777 == 0o755
    assert (path / "limits").stat().st_mode & 0o7777 == 0o644
    assert (path / "region").stat().st_mode & 0o7777 == 0o666 and (path / "region").stat().st_size == 0
    assert (tmp_path / "claims").stat().st_mode & 0o7777 == 0o700
    assert (path / "limits").read_text() == "version 1\n"
    (path / "region").write_bytes(b"library state")
    dirs.write(ClaimUID("u1"), limits="version 1\npolicy force\n")
    assert (path / "limits").read_text().endswith("policy force\n")
    assert (path / "region").exists(), "rewriting limits keeps the library's region"
    assert list(dirs.uids()) == ["u1"]
    assert dirs.remove(ClaimUID("u1")) and not dirs.remove(ClaimUID("u1"))
    assert os.listdir(tmp_path / "claims") == []


def test_failed_create_leaves_nothing(tmp_path: Path) -> None:
    def disk_full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    dirs = ClaimDirs(root=tmp_path)
    with pytest.raises(StorageError, match="No space left"):
        dirs.write(ClaimUID("u1"), limits="x", fault=disk_full)
    assert os.listdir(tmp_path) == []


def test_stale_temps_are_not_claims(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    (tmp_path / ".u9.tmp-abcd").mkdir()
    dirs.write(ClaimUID("u2"), limits="x")
    assert list(dirs.uids()) == ["u2"]
    assert [p.name for p in dirs.remove_stale_temps()] == [".u9.tmp-abcd"]
    assert os.listdir(tmp_path) == ["u2"]


def fill(directory: Path, files: int) -> None:
    for i in range(files):
        (directory / f"junk{i}").touch()


def test_removal_is_deferred_to_the_end_of_the_block(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    fill(dirs.write(ClaimUID("u1"), limits="x"), 50)
    with dirs.removals_deferred():
        with dirs.removals_deferred():  # nested: only the outermost block removes
            assert dirs.remove(ClaimUID("u1"))
        (aside,) = os.listdir(tmp_path)
        assert aside.startswith(".u1.tmp-") and len(os.listdir(tmp_path / aside)) == 52
    assert os.listdir(tmp_path) == []


def test_a_tree_past_the_bound_is_finished_by_later_removals(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path, max_entries=40)
    fill(dirs.write(ClaimUID("u1"), limits="x"), 100)
    assert dirs.remove(ClaimUID("u1"))  # the claim is gone at once ...
    assert not dirs.path(ClaimUID("u1")).exists()
    assert [n[:8] for n in os.listdir(tmp_path)] == [".u1.tmp-"]  # ... its tree waits for the next removals
    dirs.write(ClaimUID("u2"), limits="x")
    for _ in range(3):
        dirs.remove(ClaimUID("u2"))
        dirs.write(ClaimUID("u2"), limits="x")
    assert os.listdir(tmp_path) == ["u2"]


def test_an_old_world_writable_dir_is_tightened_and_a_replaced_region_put_back(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    path = dirs.write(ClaimUID("u1"), limits="x")
    path.chmod(0o1777)
    (path / "region").unlink()
    (path / "region").symlink_to("/etc/passwd")  # what a tenant could leave
    (path / "limits").unlink()
    (path / "limits" / "deep" / "tree").mkdir(parents=True)
    dirs.write(ClaimUID("u1"), limits="y")
    assert sorted(os.listdir(tmp_path)) == ["u1"], "what was in the way is set aside and removed"
    assert path.stat().st_mode & 0o7777 == 0o755
    region = (path / "region").lstat()
    assert stat.S_ISREG(region.st_mode) and region.st_size == 0 and region.st_mode & 0o777 == 0o666
    assert (path / "limits").read_text() == "y"


def test_names_in_the_root_that_are_no_claim_uids_are_left_alone(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    (tmp_path / "not a uid").mkdir()
    (tmp_path / "file").touch()
    assert list(dirs.uids()) == []
