"""What the scale benchmark reads besides pods: processes' CPU and memory (from /proc), the API server's
count of ResourceSlice writes (its /metrics), and the bytes the slices take in etcd and on the wire."""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

_TICKS = os.sysconf("SC_CLK_TCK")
_MUTATING = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION")
_SLICE_PREFIX = "/registry/resourceslices/"  # the API server's storage key of the resource


@dataclass(frozen=True, slots=True)
class ProcessUse:
    cpu_s: float  # user + system since the process started
    rss_bytes: int
    peak_rss_bytes: int


def process_use(pid: int) -> ProcessUse:
    """CPU seconds and memory of one process; zeros when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return ProcessUse(0.0, 0, 0)
    # fields[0] is the state (field 3 of stat); utime and stime are fields 14 and 15
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS

    def kib(key: str) -> int:
        return int(status.get(key, "0 kB").split()[0]) * 1024

    return ProcessUse(cpu, kib("VmRSS"), kib("VmHWM"))


def total_use(pids: Iterable[int]) -> ProcessUse:
    uses = [process_use(p) for p in pids]
    return ProcessUse(
        sum(u.cpu_s for u in uses), sum(u.rss_bytes for u in uses), sum(u.peak_rss_bytes for u in uses)
    )


_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")


def slice_writes(api: k8s.ApiClient) -> int:
    """Mutating requests on ResourceSlices the API server has answered since it started (any status)."""
    response: Any = api.call_api(
        "GET", f"{api.configuration.host}/metrics", header_params={"Accept": "text/plain"}
    )
    response.read()
    return count_slice_writes(response.data.decode("utf-8"))


def count_slice_writes(metrics: str) -> int:
    """The sum of `apiserver_request_total` samples for ResourceSlices with a mutating verb."""
    total = 0
    for line in metrics.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        if labels.get("resource") == "resourceslices" and labels.get("verb") in _MUTATING:
            total += int(float(m.group("value")))
    return total


def etcd_slice_bytes(etcd_url: str) -> tuple[int, int]:
    """(count, bytes) of the ResourceSlices as the API server stored them in etcd (protobuf), through etcd's
    JSON gateway (`/v3/kv/range` over the key prefix)."""
    key = _SLICE_PREFIX.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    body = json.dumps(
        {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()}
    ).encode()
    request = urllib.request.Request(
        f"{etcd_url}/v3/kv/range", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.loads(response.read())
    values = [base64.b64decode(kv.get("value", "")) for kv in data.get("kvs") or []]
    return len(values), sum(len(v) for v in values)


def slice_pages(api: k8s.ApiClient, *, page: int = 100) -> Iterator[dict[str, Any]]:
    """Every ResourceSlice as JSON, listed a page at a time: at 100 nodes the whole list is over 20 MB."""
    token: str | None = None
    while True:
        response: Any = k8s.ResourceV1Api(api).list_resource_slice(
            limit=page, _continue=token, _preload_content=False
        )
        data = json.loads(response.data)
        yield from data.get("items") or []
        token = (data.get("metadata") or {}).get("continue")
        if not token:
            return


def json_slice_bytes(api: k8s.ApiClient) -> int:
    """Bytes of every ResourceSlice as JSON, as a LIST returns them to a client."""
    return sum(len(json.dumps(item, separators=(",", ":"))) for item in slice_pages(api))
