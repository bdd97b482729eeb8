from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dra_driver.io import safe_tree
from kubelet_plugin.claims.tree_sweeper import TreeSweeper


def tree(root: Path, name: str, files: int) -> Path:
    d = root / name
    (d / "sub").mkdir(parents=True)
    for i in range(files):
        (d / "sub" / f"f{i}").touch()
    return d


def test_trees_take_turns_a_bounded_pass_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[tuple[str, int]] = []
    real = safe_tree.remove_tree
    both_queued = threading.Event()

    def counted(path: Path, *, max_entries: int) -> int:
        # the first pass waits until both trees are handed over, so that the order does not hang on when the
        # sweeper's thread first gets the interpreter
        assert both_queued.wait(10)
        passes.append((path.name, max_entries))
        return real(path, max_entries=max_entries)

    monkeypatch.setattr("kubelet_plugin.claims.tree_sweeper.remove_tree", counted)
    sweeper = TreeSweeper(pass_entries=25, pause_s=0)
    big, small = tree(tmp_path, "big", 100), tree(tmp_path, "small", 10)
    sweeper.add(big)
    sweeper.add(small)
    both_queued.set()
    assert sweeper.wait_idle(10)
    assert os.listdir(tmp_path) == []
    assert {n for n, _ in passes} == {"big", "small"} and all(m == 25 for _, m in passes)
    # the small tree is not left waiting behind every pass of the big one
    assert passes.index(("small", 25)) == 1
    sweeper.stop()


def test_a_tree_that_cannot_be_removed_is_given_up_and_the_thread_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(path: Path, *, max_entries: int) -> int:
        if path.name == "bad":
            raise RuntimeError("disk on fire")
        return safe_tree.remove_tree(path, max_entries=max_entries)

    monkeypatch.setattr("kubelet_plugin.claims.tree_sweeper.remove_tree", broken)
    sweeper = TreeSweeper(pass_entries=1000, pause_s=0)
    sweeper.add(tree(tmp_path, "bad", 1))
    sweeper.add(tree(tmp_path, "good", 3))
    assert sweeper.wait_idle(10)
    assert os.listdir(tmp_path) == ["bad"]
    sweeper.add(tree(tmp_path, "later", 1))
    assert sweeper.wait_idle(10) and sorted(os.listdir(tmp_path)) == ["bad"]
    sweeper.stop()
