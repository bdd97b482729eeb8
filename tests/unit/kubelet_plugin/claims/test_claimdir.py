from __future__ import annotations

import errno
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from dra_driver.libtessera.limits_file import GpuLimitLine, LimitsFile, render_limits
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.claims.claimdir import ClaimDirs
from kubelet_plugin.claims.tree_sweeper import TreeSweeper

LIMITS = LimitsFile(policy="default", log_level=1, gpus=(GpuLimitLine(GpuUUID("GPU-0"), 1 << 30, 30, 1),))
FORCE = replace(LIMITS, policy="force")


def test_write_rewrite_remove(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path / "claims")
    path = dirs.write(ClaimUID("u1"), limits=LIMITS)
    shared = dirs.shared(ClaimUID("u1"))
    # the daemon's dir holds the limits; only shared/ is mounted, and the daemon creates both files in it
    assert sorted(os.listdir(path)) == ["limits", "shared"] and shared == path / "shared"
    assert sorted(os.listdir(shared)) == ["limits", "region"]
    assert path.stat().st_mode & 0o7777 == 0o755 and shared.stat().st_mode & 0o7777 == 0o755
    assert (path / "limits").stat().st_mode & 0o7777 == 0o644
    mount_point = (shared / "limits").stat()
    assert mount_point.st_mode & 0o7777 == 0o444 and mount_point.st_size == 0, "the read-only mount covers it"
    assert (shared / "region").stat().st_mode & 0o7777 == 0o666 and (shared / "region").stat().st_size == 0
    assert (tmp_path / "claims").stat().st_mode & 0o7777 == 0o700
    assert (path / "limits").read_text() == render_limits(LIMITS)
    (shared / "region").write_bytes(b"library state")
    dirs.write(ClaimUID("u1"), limits=FORCE)
    assert "policy force\n" in (path / "limits").read_text()
    assert (shared / "region").read_bytes() == b"library state", "rewriting limits keeps the library's region"
    assert list(dirs.uids()) == ["u1"]
    assert dirs.remove(ClaimUID("u1")) and not dirs.remove(ClaimUID("u1"))
    assert dirs.sweeper.wait_idle(10)
    assert os.listdir(tmp_path / "claims") == []


def test_failed_create_leaves_nothing(tmp_path: Path) -> None:
    def disk_full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    dirs = ClaimDirs(root=tmp_path)
    with pytest.raises(StorageError, match="No space left"):
        dirs.write(ClaimUID("u1"), limits=LIMITS, fault=disk_full)
    assert os.listdir(tmp_path) == []


def test_stale_temps_are_not_claims(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    (tmp_path / ".u9.tmp-abcd").mkdir()
    dirs.write(ClaimUID("u2"), limits=LIMITS)
    assert list(dirs.uids()) == ["u2"]
    assert [p.name for p in dirs.remove_stale_temps()] == [".u9.tmp-abcd"]
    assert dirs.sweeper.wait_idle(10)
    assert os.listdir(tmp_path) == ["u2"]


def fill(directory: Path, files: int) -> None:
    for i in range(files):
        (directory / f"junk{i}").touch()


def test_removal_returns_at_once_and_the_sweeper_removes_the_tree_in_bounded_passes(tmp_path: Path) -> None:
    sweeper = TreeSweeper(pass_entries=40, pause_s=0)
    dirs = ClaimDirs(root=tmp_path, sweeper=sweeper)
    fill(dirs.write(ClaimUID("u1"), limits=LIMITS), 100)
    assert dirs.remove(ClaimUID("u1"))  # the claim is gone at once ...
    assert not dirs.path(ClaimUID("u1")).exists()
    assert sweeper.wait_idle(10)  # ... its tree in three passes, in the background
    assert os.listdir(tmp_path) == []


def test_an_old_world_writable_dir_is_tightened_and_a_replaced_region_put_back(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    path = dirs.write(ClaimUID("u1"), limits=LIMITS)
    shared = dirs.shared(ClaimUID("u1"))
    shared.chmod(0o1777)
    (shared / "region").unlink()
    (shared / "region").symlink_to("/etc/passwd")  # what a tenant could leave
    (shared / "limits").unlink()
    (shared / "limits" / "deep" / "tree").mkdir(parents=True)
    dirs.write(ClaimUID("u1"), limits=FORCE)
    assert dirs.sweeper.wait_idle(10)
    assert sorted(os.listdir(tmp_path)) == ["u1"], "what was in the way is set aside and removed"
    assert shared.stat().st_mode & 0o7777 == 0o755
    region = (shared / "region").lstat()
    assert stat.S_ISREG(region.st_mode) and region.st_size == 0 and region.st_mode & 0o777 == 0o666
    assert stat.S_ISREG((shared / "limits").lstat().st_mode), "the mount point is back"
    assert (path / "limits").read_text() == render_limits(FORCE)


def test_a_shared_dir_replaced_by_a_link_is_set_aside_and_made_again(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    victim = tmp_path.parent / f"{tmp_path.name}-victim"
    victim.mkdir()
    path = dirs.write(ClaimUID("u1"), limits=LIMITS)
    for name in os.listdir(path / "shared"):
        (path / "shared" / name).unlink()
    (path / "shared").rmdir()
    (path / "shared").symlink_to(victim)
    dirs.write(ClaimUID("u1"), limits=FORCE)
    assert dirs.sweeper.wait_idle(10)
    assert stat.S_ISDIR((path / "shared").lstat().st_mode) and os.listdir(victim) == []
    assert sorted(os.listdir(path / "shared")) == ["limits", "region"]


def test_names_in_the_root_that_are_no_claim_uids_are_left_alone(tmp_path: Path) -> None:
    dirs = ClaimDirs(root=tmp_path)
    (tmp_path / "not a uid").mkdir()
    (tmp_path / "file").touch()
    assert list(dirs.uids()) == []
