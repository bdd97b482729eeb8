"""Container output as the kubelet keeps it: `<podLogsDir>/<ns>_<pod>_<uid>/<container>/<restarts>.log` in the
CRI log format (`<time> <stream> <P|F> <text>`, a long line split into P parts ended by an F part), and the
probe's report line in it (e2e/realnode/probe.c)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROBE_PREFIX = "TESSERA-PROBE "


def container_log_dir(pod_logs: Path, *, namespace: str, name: str, uid: str, container: str) -> Path:
    return pod_logs / f"{namespace}_{name}_{uid}" / container


def parse_cri_log(text: str, *, stream: str = "stdout") -> list[str]:
    """The lines one stream wrote, partial lines joined."""
    lines: list[str] = []
    partial = ""
    for raw in text.split(
        "\n"
    ):  # only \n ends a CRI log line; str.splitlines would also split on \x1e, \x85...
        parts = raw.split(" ", 3)
        if len(parts) < 3 or parts[1] != stream:
            continue
        body = parts[3] if len(parts) == 4 else ""
        if parts[2] == "P":
            partial += body
        else:
            lines.append(partial + body)
            partial = ""
    return lines


def current_log(directory: Path) -> Path | None:
    """The log of the container's latest run (`<restart count>.log`)."""
    runs = [p for p in directory.glob("*.log") if p.stem.isdigit()]
    return max(runs, key=lambda p: int(p.stem)) if runs else None


def probe_report(directory: Path) -> dict[str, Any] | None:
    """The probe's report from the container's latest run, or None while it has not printed one."""
    path = current_log(directory)
    if path is None:
        return None
    for line in parse_cri_log(path.read_text(errors="replace")):
        if line.startswith(PROBE_PREFIX):
            report: dict[str, Any] = json.loads(line[len(PROBE_PREFIX) :])
            return report
    return None
