"""API-version gating: the node's settings less the families the cluster's scheduler cannot keep apart from
the others (docs/architecture.md, "The slice model"; `dra_driver.core.cluster_features` says which releases
can). The API server's version stands for kube-scheduler's (the skew policy allows one older); where another
scheduler places claims too (Volcano), NodeSettings `schedulerVersion` names the release of its allocator and
the older of the two decides. A Warning Event on the Node says what is not published and why."""

from __future__ import annotations

import dataclasses
from typing import Any

import structlog

from dra_driver.core.cluster_features import enforceable_families, release_version, unenforced_message
from dra_driver.core.settings import NodeSettings
from dra_driver.vocabulary.names import Family
from kubelet_plugin.node.events import SHARING_UNENFORCED_REASON, NodeEvents

log = structlog.get_logger(__name__)


def gated_settings(api: Any, settings: NodeSettings, events: NodeEvents | None) -> NodeSettings:
    """`settings` less the families the scheduler of the cluster `api` reaches cannot enforce; `settings`
    themselves when the version cannot be read or told."""
    from kubernetes import client as k8s  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
    from urllib3.exceptions import HTTPError as TransportError  # noqa: PLC0415

    schedulers: list[tuple[tuple[int, int, int], str]] = []
    if settings.scheduler_version is not None:
        declared = release_version(settings.scheduler_version)
        if declared is not None:
            schedulers.append((declared, f"a scheduler with the allocator of {settings.scheduler_version}"))
    try:
        git_version = str(k8s.VersionApi(api).get_code().git_version)
    except (ApiException, OSError, TransportError) as e:
        log.warning("plugin.server_version_unknown", error=str(e))
        git_version = ""
    server = release_version(git_version)
    if server is not None:
        schedulers.append((server, f"kube-scheduler {git_version}"))
    if not schedulers:
        return settings
    oldest, scheduler = min(schedulers)
    offered = enforceable_families(frozenset(settings.families), oldest)
    if offered == settings.families:
        return settings
    message = unenforced_message(scheduler, frozenset(settings.families - offered))
    log.warning("plugin.sharing_unenforced", server=git_version, scheduler=scheduler, message=message)
    if events is not None:
        events.warn(reason=SHARING_UNENFORCED_REASON, message=message)
    return dataclasses.replace(settings, families=frozenset(Family(f) for f in offered))
