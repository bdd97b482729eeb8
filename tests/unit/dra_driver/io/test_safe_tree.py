"""The one tree removal every cleanup path uses, on trees a hostile tenant could build."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dra_driver.io.safe_tree import TreeLimitError, is_plain_file, remove_tree
from dra_driver.vocabulary.errors import StorageError
from tests.support.open_watch import SPECIAL_KINDS, OpenWatch, can_make, make_special


def nest(top: Path, depth: int) -> None:
    """`depth` directories one inside the other, made through dir fds (the path gets too long otherwise)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.mkdir()
    (v / "keep").write_text("not yours")
    return v


def test_deeper_than_the_python_stack_and_than_path_max(tmp_path: Path) -> None:
    depth = max(sys.getrecursionlimit() + 100, 2100)  # 2 bytes a level: past PATH_MAX (4096) too
    tree = tmp_path / "t"
    tree.mkdir()
    nest(tree, depth)
    assert remove_tree(tree) > depth
    assert not tree.exists()


def test_links_are_removed_never_followed(tmp_path: Path, victim: Path) -> None:
    tree = tmp_path / "t"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "to-dir").symlink_to(victim)
    (tree / "a" / "b" / "to-file").symlink_to(victim / "keep")
    (tree / "to-root").symlink_to("/")
    os.mkfifo(tree / "a" / "fifo")
    remove_tree(tree)
    assert not tree.exists()
    assert [p.name for p in victim.iterdir()] == ["keep"] and (victim / "keep").read_text() == "not yours"


def test_a_link_or_a_file_at_the_top_is_removed_itself(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(victim)
    assert remove_tree(link) == 1 and not os.path.lexists(link) and (victim / "keep").exists()
    f = tmp_path / "f"
    f.write_text("x")
    assert remove_tree(f) == 1 and not f.exists()
    assert remove_tree(tmp_path / "absent") == 0


def test_the_bound_stops_it_with_a_clear_error_and_a_later_call_goes_on(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    for i in range(300):
        (tree / f"f{i}").touch()
    nest(tree, 50)
    with pytest.raises(TreeLimitError, match=r"stopped after 100 entries; the rest is left in place"):
        remove_tree(tree, max_entries=100)
    assert tree.is_dir() and len(os.listdir(tree)) < 300
    remove_tree(tree, max_entries=1000)
    assert not tree.exists()


def test_names_it_uses_to_flatten_may_already_exist(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    for name in (".tessera-rm-0/x", ".tessera-rm-1", "a/.tessera-rm-0/y", "a/b/c"):
        (tree / name).mkdir(parents=True)
    (tree / ".tessera-rm-2").write_text("a file where a moved directory would go")
    remove_tree(tree)
    assert not tree.exists()


def test_other_errors_are_storage_errors(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    with pytest.raises(StorageError, match="cannot open"):
        remove_tree(tmp_path / "not-a-dir" / "x")


def test_is_plain_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "l").symlink_to(tmp_path / "f")
    (tmp_path / "d").mkdir()
    assert [is_plain_file(tmp_path / n) for n in ("f", "l", "d", "none")] == [True, False, False, False]


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_device_nodes_and_fifos_in_a_tree_are_removed_unopened(tmp_path: Path, kind: str) -> None:
    """What the sweeper removes from a claim directory: a directory open with O_DIRECTORY fails on a node
    before any driver's open, and the node itself is only unlinked."""
    if not can_make(kind):
        pytest.skip("mknod of a character device needs root")
    tree = tmp_path / "t"
    (tree / "d").mkdir(parents=True)
    nodes = [tree / "node", tree / "d" / "node"]
    for node in nodes:
        make_special(node, kind)
    with OpenWatch(*nodes) as watch:
        assert remove_tree(tree) >= len(nodes)
        assert watch.total() == 0
    assert not tree.exists()
