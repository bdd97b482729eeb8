"""The two verdicts the e2e checks compare: kube-scheduler's on a pod, and `tessera explain`'s on a claim."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from dra_driver.explain.cli import main as explain_main
from e2e.harness.kube import allocated_results, get_claim, get_pod, wait_for

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SchedulerVerdict:
    bound: bool
    message: str
    results: tuple[Json, ...] = ()


def scheduler_verdict(
    api: k8s.ApiClient,
    namespace: str,
    pod: str,
    *,
    claim_name: Callable[[Json], str],
    timeout_s: float = 30,
) -> SchedulerVerdict:
    """Waits for kube-scheduler's decision on `pod`: bound (with the allocation of the claim `claim_name`
    picks from the bound pod), or marked Unschedulable (with the scheduler's message)."""

    def decided() -> SchedulerVerdict | None:
        got = get_pod(api, namespace, pod) or {}
        if (got.get("spec") or {}).get("nodeName"):
            claim = get_claim(api, namespace, claim_name(got)) or {}
            return SchedulerVerdict(True, "", tuple(allocated_results(claim)))
        for c in (got.get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return SchedulerVerdict(False, str(c.get("message")))
        return None

    verdict: SchedulerVerdict = wait_for(f"the scheduler's verdict on {pod}", decided, timeout_s=timeout_s)
    return verdict


def explain_verdict(args: Sequence[str], *, node: str, kubeconfig: Path) -> tuple[int, Json]:
    """`tessera explain ARGS --node NODE --kubeconfig ... --output json`, run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = explain_main(
            ["explain", *args, "--node", node, "--kubeconfig", str(kubeconfig), "--output", "json"]
        )
    return code, json.loads(out.getvalue()) if out.getvalue() else {}
