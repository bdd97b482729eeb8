"""Kubeconfig files (the standard `apiVersion: v1, kind: Config` format) with the credentials
embedded, so a file is usable on its own."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from e2e.controlplane.certs import KeyPair
from e2e.controlplane.files import write_atomic

CLUSTER_NAME = "tessera-e2e"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def render_kubeconfig(*, server: str, ca_cert: Path, client: KeyPair, user: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(client.cert), "client-key-data": _b64(client.key)},
            }
        ],
        "contexts": [{"name": f"{user}@{CLUSTER_NAME}", "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": f"{user}@{CLUSTER_NAME}",
        "preferences": {},
    }


def write_kubeconfig(path: Path, *, server: str, ca_cert: Path, client: KeyPair, user: str) -> Path:
    document = render_kubeconfig(server=server, ca_cert=ca_cert, client=client, user=user)
    write_atomic(path, yaml.safe_dump(document, sort_keys=False).encode("utf-8"))
    return path
