"""One instance on the node leads (runs the loops writing node-wide files); another takes over at its exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from kubelet_plugin.node.leader_lock import LeaderLock


def test_one_leads_and_another_takes_over_once_it_gives_the_lead_up(tmp_path: Path) -> None:
    first = LeaderLock(tmp_path / "loops.lock", what="loops")
    second = LeaderLock(tmp_path / "loops.lock", what="loops")
    assert first.leads() and first.leads()
    assert not second.leads() and not second.leads()
    first.close()
    assert second.leads() and not first.leads()
    second.close()


def test_threads_of_one_instance_share_its_lead(tmp_path: Path) -> None:
    lock = LeaderLock(tmp_path / "loops.lock", what="loops")
    answers: list[bool] = []
    threads = [threading.Thread(target=lambda: answers.append(lock.leads())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [True] * 8
    lock.close()


def test_the_lead_passes_when_the_leading_process_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "loops.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from pathlib import Path\n"
            "from kubelet_plugin.node.leader_lock import LeaderLock\n"
            f"assert LeaderLock(Path({str(path)!r}), what='loops').leads()\n"
            "print('leads', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[4],
    )
    assert holder.stdout is not None
    assert "leads" in (line.strip() for line in iter(holder.stdout.readline, ""))  # after its log line
    ours = LeaderLock(path, what="loops")
    assert not ours.leads()
    os.kill(holder.pid, signal.SIGKILL)  # no clean stop: the kernel drops the flock with its descriptors
    holder.wait(5)
    assert ours.leads()
    assert path.stat().st_mode & 0o777 == 0o600
    ours.close()


def test_a_lock_that_cannot_be_opened_leads_nothing_and_is_asked_again(tmp_path: Path) -> None:
    lock = LeaderLock(tmp_path / "missing" / "loops.lock", what="loops")
    assert not lock.leads()
    (tmp_path / "missing").mkdir()
    assert lock.leads()
    lock.close()
