"""API-version gating: the node's settings less the families the cluster's scheduler cannot keep apart from
the others (docs/architecture.md, "The slice model"; `dra_driver.core.cluster_features` says which releases
can). The API server's version stands for the scheduler's (the skew policy allows one older); a Warning Event
on the Node says what is not published and why."""

from __future__ import annotations

import dataclasses
from typing import Any

import structlog

from dra_driver.core.cluster_features import enforceable_families, server_minor, unenforced_message
from dra_driver.core.settings import NodeSettings
from dra_driver.vocabulary.names import Family
from kubelet_plugin.node.events import SHARING_UNENFORCED_REASON, NodeEvents

log = structlog.get_logger(__name__)


def gated_settings(api: Any, settings: NodeSettings, events: NodeEvents | None) -> NodeSettings:
    """`settings` less the families the scheduler of the cluster `api` reaches cannot enforce; `settings`
    themselves when the version cannot be read or told."""
    from kubernetes import client as k8s  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        git_version = str(k8s.VersionApi(api).get_code().git_version)
    except (ApiException, OSError) as e:
        log.warning("plugin.server_version_unknown", error=str(e))
        return settings
    server = server_minor(git_version)
    if server is None:
        return settings
    offered = enforceable_families(frozenset(settings.families), server)
    if offered == settings.families:
        return settings
    message = unenforced_message(git_version, frozenset(settings.families - offered))
    log.warning("plugin.sharing_unenforced", server=git_version, message=message)
    if events is not None:
        events.warn(reason=SHARING_UNENFORCED_REASON, message=message)
    return dataclasses.replace(settings, families=frozenset(Family(f) for f in offered))
