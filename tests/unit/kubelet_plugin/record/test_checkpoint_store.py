"""Which save of the checkpoint is on disk (`Stamp`): what two instances on one node test before they act on
the checkpoint they hold (issue #34)."""

from __future__ import annotations

import os
from pathlib import Path

from kubelet_plugin.record.checkpoint import Checkpoint, encode
from kubelet_plugin.record.checkpoint_store import ABSENT, CheckpointStore, checkpoint_stamp


def test_each_save_changes_the_stamp_and_an_equal_stamp_means_equal_content(tmp_path: Path) -> None:
    store = CheckpointStore(path=tmp_path / "checkpoint.json")
    assert store.stamp() == ABSENT
    seen = {ABSENT: b""}
    last = ABSENT
    for boot in ("a", "b", "a", "a", "b"):  # the same content saved again is another save, of the same size
        saved = store.save(Checkpoint(boot_id=boot), durable=False)
        stamp = store.stamp()
        assert saved == stamp  # what the save says it left is what a reader finds
        assert stamp is not None and stamp != last and stamp.checksum is not None
        # a reused inode in the same tick may bring an older stamp back, but only with that save's content
        assert seen.setdefault(stamp, store.path.read_bytes()) == store.path.read_bytes()
        assert store.stamp() == stamp  # nothing saved since: the same
        cp, loaded = store.load_stamped(boot_id="-")
        assert (cp, loaded) == (Checkpoint(boot_id=boot), stamp)
        last = stamp


def test_a_file_with_the_old_ones_identity_but_other_content_is_another_save(tmp_path: Path) -> None:
    """An inode number reused within one tick of the file system's clock, at the same size, would pass for
    the file it replaced if the stamp were the file's identity alone: the checksum at the head tells them
    apart."""
    path = tmp_path / "checkpoint.json"
    path.write_bytes(encode(Checkpoint(boot_id="a")))
    before = checkpoint_stamp(path)
    st = path.stat()
    with path.open("r+b") as f:  # the same inode, size and mtime; another checkpoint in it
        f.write(encode(Checkpoint(boot_id="b")))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = checkpoint_stamp(path)
    assert before is not None and after is not None
    assert (after.device, after.inode, after.mtime_ns, after.size) == (
        before.device,
        before.inode,
        before.mtime_ns,
        before.size,
    )
    assert after != before


def test_what_cannot_be_a_checkpoint_has_no_stamp_to_match(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")  # opened without blocking, never read
    assert checkpoint_stamp(tmp_path / "dir") is None
    assert checkpoint_stamp(tmp_path / "fifo") is None
    (tmp_path / "junk").write_bytes(b"not a checkpoint")
    junk = checkpoint_stamp(tmp_path / "junk")
    assert junk is not None and junk.checksum is None  # told apart by its identity alone (decode says why)
