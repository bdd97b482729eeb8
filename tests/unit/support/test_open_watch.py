"""The open counter the tests use to prove a device node was never opened: it must see real opens (or those
tests could not fail) and must not see O_PATH ones (or they could not pass)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.open_watch import SPECIAL_KINDS, OpenWatch, can_make, make_special


@pytest.mark.parametrize("kind", [*SPECIAL_KINDS, "regular file"])
def test_real_opens_count_and_o_path_opens_do_not(tmp_path: Path, kind: str) -> None:
    if not can_make(kind):
        pytest.skip("mknod of a character device needs root")
    path = tmp_path / "node"
    if kind == "regular file":
        path.write_bytes(b"x")
    else:
        make_special(path, kind)
    with OpenWatch(path) as watch:
        os.close(os.open(path, os.O_PATH | os.O_NOFOLLOW))
        os.stat(path)
        assert watch.opens() == {path: 0}
        for _ in range(3):  # O_NONBLOCK: a FIFO without a writer opens at once for reading
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        assert watch.total() == 3
