"""The admission component's commands: `tessera convert` and `tessera webhook` (only the webhook's parser
here: the server's modules load when the command runs, so other `tessera` commands do not pay for them).
Their help is CONVERT_DOC and WEBHOOK_DOC."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from admission.convert.catalog import Catalog, from_slices, known_products
from admission.convert.claims import Options
from admission.convert.node_config import hami_node_notes
from admission.convert.pod import TEMPLATE_PATHS, ObjectConversion, convert_object
from dra_driver.io.yaml_files import read_yaml
from dra_driver.vocabulary.errors import TesseraError

MAX_CONFIG_ENTRY_CHARS = 1 << 20  # a ConfigMap holds at most 1 MiB
VOLCANO = "volcano"
# What becomes of a converted pod's `schedulerName: volcano` (docs/volcano.md, "Volcano's vGPU YAML"): kept,
# so vc-scheduler places it (Volcano 1.12+ serves DRA claims), removed, so kube-scheduler does, or (the
# webhook's default) kept where the cluster serves Volcano's API and removed where it does not.
VOLCANO_MODES = ("auto", "keep", "remove")


def _documents(path: str) -> list[Any]:
    """The file's documents, read with bounds (size, nesting, aliases): dra_driver/io/yaml_files.py."""
    return [d for d in read_yaml(path) if d is not None]


def _catalog(paths: Sequence[str]) -> Catalog:
    if not paths:
        return known_products()
    slices: list[Any] = []
    for p in paths:
        for d in _documents(p):
            items = d.get("items") if isinstance(d, dict) and d.get("kind", "").endswith("List") else [d]
            slices.extend(i for i in items or () if isinstance(i, dict) and i.get("kind") == "ResourceSlice")
    return from_slices(slices)


def replaced_schedulers(args: argparse.Namespace, *, volcano_served: bool) -> tuple[str, ...]:
    """The schedulerNames a converted pod loses: none with --keep-scheduler; else every --replace-scheduler
    (an explicit `volcano` there wins over --volcano), and `volcano` when --volcano says remove, or says auto
    and the cluster does not serve Volcano's API (`volcano_served`)."""
    if args.keep_scheduler:
        return ()
    listed = tuple(dict.fromkeys(args.replace_scheduler or ()))
    mode = getattr(args, "volcano", "keep")
    if VOLCANO in listed or mode == "keep" or (mode == "auto" and volcano_served):
        return listed
    return (*listed, VOLCANO)


def options_from_args(args: argparse.Namespace, *, volcano_served: bool = False) -> Options:
    return Options(
        catalog=_catalog(getattr(args, "slices", None) or ()),
        high_priority_class=args.high_priority_class,
        replace_schedulers=replaced_schedulers(args, volcano_served=volcano_served),
    )


def add_options(p: argparse.ArgumentParser, *, volcano: str) -> None:
    """The conversion's options, shared by `convert` and `webhook` (`volcano`: --volcano's default)."""
    p.add_argument(
        "--high-priority-class",
        metavar="CLASS",
        help="DeviceClass for nvidia.com/priority: 0 (one whose config sets VgpuConfig priority 0); "
        "without it such pods are refused",
    )
    p.add_argument(
        "--replace-scheduler",
        action="append",
        metavar="NAME",
        help="schedulerName a converted pod loses, so the default scheduler allocates its claims "
        "(repeatable; volcano: see --volcano)",
    )
    p.add_argument(
        "--volcano",
        choices=VOLCANO_MODES if volcano == "auto" else VOLCANO_MODES[1:],
        default=volcano,
        help="schedulerName volcano: keep it (Volcano 1.12+ with DRA places the claims), remove it "
        "(kube-scheduler does)"
        + (", or auto: keep it while the cluster serves Volcano's API" if volcano == "auto" else "")
        + f" (default: {volcano})",
    )
    p.add_argument("--keep-scheduler", action="store_true", help="never change a pod's schedulerName")


def _summary(path: str, results: Sequence[ObjectConversion]) -> str:
    lines = []
    for r in results:
        meta = r.obj.get("metadata") or {}
        lines.append(f"{path}: {r.obj.get('kind')}/{meta.get('name', '?')}")
        if r.claim is not None:
            lines.extend(f"  {s}" for s in r.claim.summary)
            if not r.claim.changed:
                lines.append("  no request of NVIDIA's DRA driver")
        elif not r.pod.changed and not (r.obj.get("kind") == "ConfigMap" and r.pod.notes):
            lines.append("  no HAMi or Volcano GPU request")
        for t in r.pod.templates:
            lines.append(f"  container {t.container}: {t.summary}, from template {t.name}")
        lines.extend(f"  note: {n}" for n in r.pod.notes)
    return "\n".join(lines) + "\n"


def _with_node_notes(doc: Mapping[str, Any], result: ObjectConversion) -> ObjectConversion:
    """A ConfigMap holding HAMi's node configuration passes through unchanged, with notes saying what a node
    group sets instead (admission/convert/node_config.py); its YAML or JSON entries are parsed here."""
    data = doc.get("data")
    if doc.get("kind") != "ConfigMap" or not isinstance(data, Mapping):
        return result
    parsed: dict[str, object] = {}
    for key, text in data.items():
        named = isinstance(key, str) and key.endswith((".yaml", ".yml", ".json"))
        if named and isinstance(text, str) and len(text) <= MAX_CONFIG_ENTRY_CHARS:
            try:
                parsed[key] = yaml.safe_load(text)  # JSON is YAML too
            except yaml.YAMLError:
                continue  # not HAMi's: nothing to say about it
    notes = hami_node_notes(parsed)
    return dataclasses.replace(result, pod=dataclasses.replace(result.pod, notes=result.pod.notes + notes))


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    out: list[Any] = []
    for path in args.files:
        documents = _documents(path)  # its errors name the file already
        try:
            results = [
                _with_node_notes(d, convert_object(d, options)) for d in documents if isinstance(d, dict)
            ]
        except TesseraError as e:
            sys.stderr.write(f"tessera convert: {path}: {e}\n")
            return 2
        if not args.summary:  # the output has no place for a ConfigMap's notes: say them beside it
            for r in results:
                if r.obj.get("kind") == "ConfigMap":
                    name = (r.obj.get("metadata") or {}).get("name", "?")
                    sys.stderr.writelines(
                        f"tessera convert: {path}: ConfigMap/{name}: {n}\n" for n in r.pod.notes
                    )
        if args.summary:
            sys.stdout.write(_summary(path, results))
        else:
            out.extend(m for r in results for m in r.manifests())
    if args.summary:
        return 0
    if args.output == "json":
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False))
    return 0


def workload_claims(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """For `tessera explain FILE`: the templates the Pods and workloads in FILE would get (none when it
    holds none), converted for every product Tessera knows."""
    docs = [d for d in _documents(str(path)) if isinstance(d, dict) and d.get("kind") in TEMPLATE_PATHS]
    options = Options(known_products())
    out: list[tuple[str, dict[str, Any]]] = []
    for d in docs:
        result = convert_object(d, options)
        name = f"{d.get('kind')}/{(d.get('metadata') or {}).get('name', '?')}"
        out.extend(
            (f"{name} container {t.container}: {t.summary}", t.manifest(None)) for t in result.pod.templates
        )
    return out


CONVERT_DOC = """`tessera convert FILE…`: HAMi/Volcano workloads → the same workloads on Tessera, with their
templates; ResourceClaims and ResourceClaimTemplates written for NVIDIA's DRA driver (gpu.nvidia.com,
mig.nvidia.com) → the same claims on Tessera's DeviceClasses (docs/migration-from-nvidia-dra.md).

    tessera convert deploy/*.yaml [--slices SLICES.yaml] [--high-priority-class CLASS] [-o yaml|json]
    tessera convert --summary FILE…

prints, for each file, the ResourceClaimTemplates to apply first and every object as Tessera runs it (objects
that ask for no foreign GPU unchanged), with the conversion the webhook makes at admission. `--summary`
prints what each container gets instead. Exit 0: converted; 2: a file cannot be read or converted (the
message names the file, the object and the field).
"""


def add_convert_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`tessera convert`; kubelet_plugin.command adds it to `tessera`."""
    p = subparsers.add_parser(
        "convert",
        help="print HAMi/Volcano workloads and NVIDIA DRA claims as they run on Tessera (templates first)",
        description=CONVERT_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="YAML files of Pods, workloads or claims; - for stdin"
    )
    p.add_argument(
        "--slices",
        action="append",
        metavar="FILE",
        help="ResourceSlices (kubectl get resourceslices -o yaml) to take the offered GPU products from "
        "(default: every product Tessera knows)",
    )
    # Offline: a pod that names Volcano was written for a cluster that runs it, so it keeps its scheduler.
    add_options(p, volcano="keep")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--summary", action="store_true", help="say what each container gets instead")
    p.set_defaults(handler=run)


# ---- tessera webhook ---------------------------------------------------------------------------

WEBHOOK_DOC = """`tessera webhook`: the mutating admission webhook, as the chart runs it (2 replicas).

    tessera webhook --namespace NS --service SVC --secret SECRET --webhook-configuration NAME [--port 8443]
    tessera webhook --cert-dir /tls ...          (cert-manager's Secret, mounted)
    tessera webhook ... --metrics-address :9401  (its Prometheus metrics, plain HTTP; "" for none)

Serves POST /mutate over HTTPS, writing nothing while it answers; keeps its own certificate in SECRET (or
reloads --cert-dir); refreshes the catalog of offered GPU products from the ResourceSlices every
--catalog-refresh seconds; makes the claim templates of converted pods the API server admitted, and deletes
those it made once no live pod references them for --template-grace seconds.
"""


def _run(args: argparse.Namespace) -> int:
    from admission.main import run  # noqa: PLC0415 - deferred on purpose: see the module's doc

    return run(args)


def add_webhook_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`tessera webhook`; kubelet_plugin.command adds it to `tessera`. Its modules load when it runs."""
    p = subparsers.add_parser(
        "webhook",
        help="serve the admission webhook that turns HAMi/Volcano GPU requests into claims",
        description=WEBHOOK_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--address", default="0.0.0.0", help="listen address (default: all)")
    p.add_argument("--port", type=int, default=8443)
    p.add_argument(
        "--metrics-address",
        default=":9401",
        metavar="HOST:PORT",
        help="serve the webhook's Prometheus metrics over plain HTTP here (default :9401, every interface; "
        "empty: none)",
    )
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
    p.add_argument(
        "--template-resync",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often to make missing claim templates and look for unused ones (besides the watches)",
    )
    p.add_argument(
        "--template-grace",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long a claim template the webhook made stays once no live pod references it",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", default="json", choices=("json", "console"))
    add_options(p, volcano="auto")
    p.set_defaults(handler=_run)
