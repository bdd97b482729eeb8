"""The node's view of a GPU, written in place (the library reads it: tests/integration/test_gpu_sharing)."""

from __future__ import annotations

from pathlib import Path

from dra_driver.libtessera.view_layout import FILE_SIZE, HEADER, MAGIC, VIEW_SIZE, Part
from kubelet_plugin.library_files.gpu_view import GpuView

PARTS = (Part(1, 0, 30_000), Part(2, 30_000, 50_000), Part(3, 0, 0, free_pct=80))


def test_a_schedule_written_reads_back_and_outlives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "gpus" / "GPU-0" / "view"
    view = GpuView(path)
    view.write_schedule(PARTS, frame_us=50_000)
    view.write_hold(hold_until_ns=7, now_ns=5, high_active=1)
    inode = path.stat().st_ino
    view.close()
    again = GpuView(path)  # a restarted daemon: containers keep the file mapped, so it is written in place
    try:
        assert again.read_schedule() == (50_000, PARTS) and again.hold_until_ns() == 7
        assert path.stat().st_ino == inode and path.stat().st_size == FILE_SIZE
        assert path.stat().st_mode & 0o7777 == 0o644
    finally:
        again.close()


def test_a_view_of_an_older_layout_is_formatted_again(tmp_path: Path) -> None:
    path = tmp_path / "view"
    old = bytearray(FILE_SIZE)
    HEADER.pack_into(old, 0, MAGIC, 1, VIEW_SIZE)
    old[100:104] = b"\xff" * 4  # an old schedule entry
    path.write_bytes(bytes(old))
    view = GpuView(path)
    try:
        assert view.read_schedule() == (0, ())
        assert HEADER.unpack_from(path.read_bytes()) == (MAGIC, 2, VIEW_SIZE)
    finally:
        view.close()
