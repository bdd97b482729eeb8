"""`tessera webhook`: the mutating admission webhook, as the chart runs it (2 replicas, one Service).

    tessera webhook --namespace NS --service SVC --secret SECRET --webhook-configuration NAME [--port 8443]
    tessera webhook --cert-dir /tls ...          (cert-manager's Secret, mounted)

Serves POST /mutate over HTTPS; keeps its own certificate in SECRET (or reloads --cert-dir); refreshes the
catalog of offered GPU products from the ResourceSlices every --catalog-refresh seconds. Only the parser
lives here: the server's modules load when the command runs, so other `tessera` commands do not pay for them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from admission.convert_cli import add_options


def _run(args: argparse.Namespace) -> int:
    from admission.main import run  # noqa: PLC0415 - deferred on purpose, see the module doc

    return run(args)


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`tessera webhook`; kubelet_plugin.command adds it to `tessera`."""
    p = subparsers.add_parser(
        "webhook",
        help="serve the admission webhook that turns HAMi/Volcano GPU requests into claims",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--address", default="0.0.0.0", help="listen address (default: all)")
    p.add_argument("--port", type=int, default=8443)
    p.add_argument("--kubeconfig", type=Path, help="default: the pod's service account")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "tessera-system"))
    p.add_argument("--service", help="the webhook's Service (its DNS names go into the certificate)")
    p.add_argument("--dns-name", action="append", help="another name or IP for the certificate; repeatable")
    p.add_argument("--secret", default="tessera-admission-tls", help="Secret the webhook keeps its TLS in")
    p.add_argument(
        "--webhook-configuration",
        default="tessera-admission",
        help="MutatingWebhookConfiguration to set caBundle of",
    )
    p.add_argument("--cert-dir", type=Path, help="serve tls.crt/tls.key from here (cert-manager) instead")
    p.add_argument("--certificate-check", type=float, default=3600.0, metavar="SECONDS")
    p.add_argument("--catalog-refresh", type=float, default=30.0, metavar="SECONDS")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", default="json", choices=("json", "console"))
    add_options(p)
    p.set_defaults(handler=_run)
