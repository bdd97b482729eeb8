"""The ResourceSlice publisher as the daemon runs it: what it publishes (the node's slices from its
inventory, settings gated by the cluster's version, the MIG placements Tessera holds and the GPUs' taints —
health and an administrator's cordons; nothing while another GPU device plugin serves the node), in its own
thread, with the reader of the Node (that other plugin, the cordons) in another."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dra_driver.core.cordon import cordon_taints, merged_taints
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.core.taints import gpu_taints
from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.node.events import NodeEvents
from kubelet_plugin.node.foreign_plugin import ForeignPluginGuard
from kubelet_plugin.node.gpu_cordons import GpuCordons
from kubelet_plugin.node.node_reader import NodeReader
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.readiness import Readiness
from kubelet_plugin.serving.version_gate import gated_settings

if TYPE_CHECKING:
    from dra_driver.core.gpu_health import GpuCondition
    from kubelet_plugin.publish.publisher import SlicePublisher


@dataclass(frozen=True, slots=True)
class Publishing:
    publisher: SlicePublisher
    thread: threading.Thread  # ends within a watch's timeout once `stop` is set
    cordons: GpuCordons  # the GPUs an administrator cordoned, as the Node last said


def start_publishing(
    *,
    api: Any,
    options: DaemonOptions,
    state: NodeState,
    settings: NodeSettings,
    conditions: Callable[[], Mapping[GpuUUID, GpuCondition]],
    readiness: Readiness,
    events: NodeEvents | None,
    stop: threading.Event,
) -> Publishing:
    """Start publishing the node's pool through `api`; `conditions`: the GPUs' health as last polled."""
    from kubernetes import client as k8s  # noqa: PLC0415

    from kubelet_plugin.publish.publisher import SlicePublisher  # noqa: PLC0415 - needs the API client

    settings = gated_settings(api, settings, events)
    # another GPU device plugin on this node: publish nothing; the GPUs an administrator cordoned: taint
    # them (both read from the Node before the first publish)
    rest = RestCalls(api)
    guard = ForeignPluginGuard(
        rest=rest,
        node_name=options.node_name,
        split=options.gpus_split_with_device_plugin,
        events=events,
    )
    cordons = GpuCordons(node_name=options.node_name, events=events)
    reader = NodeReader(
        rest=rest,
        node_name=options.node_name,
        observers=(guard.observe, cordons.observe),
        on_change=lambda: publisher.request_resync("node"),
    )
    reader.check()

    def desired(degraded: bool) -> Sequence[dict[str, object]]:
        if guard.blocked:
            return ()
        inventory = state.backend.inventory()
        return build_slices(
            inventory,
            settings,
            owned_placements=state.placements(),
            degraded=degraded,
            taints=merged_taints(gpu_taints(conditions()), cordon_taints(inventory, cordons.current())),
            taints_supported=publisher.taints_supported,
        )

    publisher = SlicePublisher(api=k8s.ResourceV1Api(api), node_name=options.node_name, events=events)
    thread = threading.Thread(
        target=publisher.run,
        kwargs={"desired": desired, "stop": stop, "on_published": readiness.published},
        name="slice-publisher",
        daemon=True,
    )
    thread.start()
    threading.Thread(target=reader.run, args=(stop,), name="node-reader", daemon=True).start()
    return Publishing(publisher, thread, cordons)
