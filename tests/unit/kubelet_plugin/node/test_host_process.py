"""Finding a process again by pid: only the one started with our environment entry, zombies are exited."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from kubelet_plugin.node.host_process import end_process, is_live_process, wait_gone


def test_a_process_is_ours_only_with_our_environment_entry() -> None:
    marked = {"PATH": os.environ["PATH"], "MARK": "a"}
    p = subprocess.Popen(["sleep", "30"], env=marked, start_new_session=True)
    try:
        # until the child has exec'd: before that, /proc shows the parent's copy (its environment, its name)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{p.pid}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert is_live_process(p.pid, env_entry="MARK=a", comm="sleep")
        assert not is_live_process(p.pid, env_entry="MARK=b", comm="sleep")  # a reused pid is not ours
        assert not wait_gone(p.pid, 0.05)
        assert end_process(p.pid)
        assert not is_live_process(p.pid, env_entry="MARK=a", comm="sleep")
    finally:
        p.kill()
        p.wait()


def test_an_exited_unreaped_child_counts_as_gone_and_is_reaped() -> None:
    p = subprocess.Popen(["true"])
    assert wait_gone(p.pid, 5)
    assert not os.path.exists(f"/proc/{p.pid}")
    p.returncode = 0  # reaped by wait_gone, not by Popen


def test_no_such_process() -> None:
    assert not is_live_process(2**22 + 7, env_entry="X=1", comm="x")
    assert wait_gone(2**22 + 7, 0)
