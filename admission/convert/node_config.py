"""HAMi's node configuration → what a Tessera node group sets instead, as notes (pure).

HAMi keeps its node settings in ConfigMaps, not in the workloads: the scheduler's `hami-scheduler-device`
(`device-config.yaml`: `nvidia.deviceMemoryScaling`, for every node) and the device plugin's
`hami-device-plugin` (`config.json`: `nodeconfig[].devicememoryscaling`, per node by `name`). Tessera's
equivalent is a node group's `memoryOversubscription` in the chart's values (docs/gpu-sharing.md,
"Oversubscription"), so `tessera convert` passes such a ConfigMap through unchanged and says, in its notes,
what to set. The caller parses the ConfigMap's data entries (YAML or JSON text) at the edge; here each
entry is a parsed document.
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.core.families.oversubscription import MAX_RATIO
from dra_driver.vocabulary.excerpt import excerpt

MAX_NODE_ENTRIES = 256  # notes per ConfigMap entry: a fleet's node list, not an unbounded one
_SETTING = "memoryOversubscription"
_OPT_IN = (
    "unlike HAMi, only claims that opt in (DeviceClass vgpu-oversubscribed.tessera.dev, asking virtualMemory "
    "beside memory) get memory beyond the GPU's, served from host memory the node must have "
    '(docs/gpu-sharing.md, "Oversubscription")'
)


def _note(field: str, raw: object, group: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return f"{field}: {excerpt(raw)} is not a number; HAMi's deviceMemoryScaling is Tessera's {_SETTING}"
    if raw < 1:
        return (
            f"{field} {raw:g}: Tessera does not scale a GPU's memory down ({_SETTING} is at least 1); give "
            "claims smaller memory requests instead"
        )
    if raw == 1:
        return f"{field} 1: Tessera's default ({_SETTING}: 1, no oversubscription); nothing to set"
    if raw > MAX_RATIO:
        return (
            f"{field} {raw:g}: Tessera's {_SETTING} is at most {MAX_RATIO}; set nodeGroups[].{_SETTING}: "
            f"{MAX_RATIO} or less for {group}; {_OPT_IN}"
        )
    return f"{field} {raw:g} is nodeGroups[].{_SETTING}: {raw:g} for {group}; {_OPT_IN}"


def hami_node_notes(data: Mapping[str, object]) -> tuple[str, ...]:
    """Notes for a ConfigMap's parsed data entries (entry name → document): HAMi's memory scaling, global
    (`nvidia.deviceMemoryScaling`) or per node (`nodeconfig[].devicememoryscaling`), as the node group
    setting that stands for it. Nothing for data that holds neither."""
    notes: list[str] = []
    for key in sorted(data):
        doc = data[key]
        if not isinstance(doc, Mapping):
            continue
        nvidia = doc.get("nvidia")
        if isinstance(nvidia, Mapping) and "deviceMemoryScaling" in nvidia:
            notes.append(
                _note(f"{key}: nvidia.deviceMemoryScaling", nvidia["deviceMemoryScaling"], "every group")
            )
        nodes = doc.get("nodeconfig")
        if not isinstance(nodes, list):
            continue
        for i, node in enumerate(nodes[:MAX_NODE_ENTRIES]):
            if isinstance(node, Mapping) and "devicememoryscaling" in node:
                name = node.get("name")
                group = (
                    f"the group of node {excerpt(name, bare=True)}" if isinstance(name, str) else "its group"
                )
                notes.append(
                    _note(f"{key}: nodeconfig[{i}].devicememoryscaling", node["devicememoryscaling"], group)
                )
        if len(nodes) > MAX_NODE_ENTRIES:
            notes.append(f"{key}: nodeconfig: {len(nodes) - MAX_NODE_ENTRIES} more nodes not read")
    return tuple(notes)
