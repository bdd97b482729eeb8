"""The kubelet's own count of DRA operations, from its /metrics endpoint (127.0.0.1, the port in the kubelet's
config; the admin client certificate authenticates, the Webhook authorizer lets system:masters in):

- `dra_operations_duration_seconds_count{operation_name, is_error}`: PrepareResources / UnprepareResources
  for all of a pod's claims, failed or not;
- `dra_grpc_operations_duration_seconds_count{driver_name, method_name, grpc_status_code}`: every gRPC call
  the kubelet made to a DRA plugin and how it ended.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections import Counter
from dataclasses import dataclass

from e2e.controlplane.certs import KeyPair

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
OPERATIONS = "dra_operations_duration_seconds_count"
GRPC_CALLS = "dra_grpc_operations_duration_seconds_count"


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric `name` in Prometheus text format: (labels, value)."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group("name") == name:
            labels = dict(_LABEL.findall(m.group("labels") or ""))
            out.append((labels, float(m.group("value"))))
    return out


@dataclass(frozen=True, slots=True)
class DraCounts:
    operations: Counter[tuple[str, bool]]  # (PrepareResources|UnprepareResources, failed) → count
    grpc: Counter[tuple[str, str]]  # (gRPC method, status code) → count, Tessera's driver only

    def __sub__(self, earlier: DraCounts) -> DraCounts:
        return DraCounts(operations=self.operations - earlier.operations, grpc=self.grpc - earlier.grpc)

    def operation(self, name: str, *, failed: bool) -> int:
        return self.operations[(name, failed)]

    def grpc_calls(self) -> dict[str, int]:
        """gRPC method (last path element) → calls, whatever their status."""
        calls: Counter[str] = Counter()
        for (method, _code), n in self.grpc.items():
            calls[method.rsplit("/", 1)[-1]] += n
        return dict(calls)

    def failed_grpc(self) -> int:
        return sum(n for (_method, code), n in self.grpc.items() if code != "OK")


def parse_dra_counts(text: str, *, driver: str) -> DraCounts:
    operations: Counter[tuple[str, bool]] = Counter()
    for labels, value in samples(text, OPERATIONS):
        operations[(labels.get("operation_name", ""), labels.get("is_error") == "true")] += int(value)
    grpc: Counter[tuple[str, str]] = Counter()
    for labels, value in samples(text, GRPC_CALLS):
        if labels.get("driver_name") == driver:
            grpc[(labels.get("method_name", ""), labels.get("grpc_status_code", ""))] += int(value)
    return DraCounts(operations=operations, grpc=grpc)


def fetch_metrics(*, port: int, client: KeyPair, timeout_s: float = 10.0) -> str:
    context = ssl.create_default_context()
    # The kubelet serves with the self-signed certificate it made itself at start; nothing to verify it with.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(client.cert), str(client.key))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=timeout_s) as r:
        body: bytes = r.read()
    return body.decode()
