"""Checks every ResourceSlice list must pass: API limits, pool consistency, counter references."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kubernetes.client import ApiClient, V1ResourceSlice

from dra_driver.core.families.base import Json
from dra_driver.vocabulary.names import DRIVER_NAME

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def quantity(text: str) -> int:
    return int(text[:-2]) * 1024 * 1024 if text.endswith("Mi") else int(text)


def counter_sets(slices: Sequence[Json]) -> dict[str, dict[str, int]]:
    sets: dict[str, dict[str, int]] = {}
    for s in slices:
        for cs in s["spec"].get("sharedCounters", []):
            assert cs["name"] not in sets, f"counter set {cs['name']} twice in the pool"
            sets[cs["name"]] = {k: quantity(v["value"]) for k, v in cs["counters"].items()}
    return sets


def devices(slices: Sequence[Json]) -> list[Json]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


def check_slices(slices: Sequence[Json], node: str) -> None:
    names = [s["metadata"]["name"] for s in slices]
    assert len(set(names)) == len(names)
    generations = set()
    for s in slices:
        meta, spec = s["metadata"], s["spec"]
        assert isinstance(meta, dict) and isinstance(spec, dict)
        assert DNS_SUBDOMAIN.match(meta["name"]) and len(meta["name"]) <= 253
        assert spec["driver"] == DRIVER_NAME and spec["nodeName"] == node
        assert spec["pool"]["name"] == node and spec["pool"]["resourceSliceCount"] == len(slices)
        generations.add(spec["pool"]["generation"])
        assert ("devices" in spec) != ("sharedCounters" in spec), "devices and counters never share a slice"
        if "sharedCounters" in spec:
            assert 1 <= len(spec["sharedCounters"]) <= 8
            for cs in spec["sharedCounters"]:
                assert DNS_LABEL.match(cs["name"]) and 1 <= len(cs["counters"]) <= 32
                assert all(DNS_LABEL.match(c) for c in cs["counters"])
        else:
            devs = spec["devices"]
            uses = any("consumesCounters" in d or "taints" in d for d in devs)
            assert 1 <= len(devs) <= (64 if uses else 128)
            for d in devs:
                assert DNS_LABEL.match(d["name"]), d["name"]
                assert len(d.get("attributes", {})) + len(d.get("capacity", {})) <= 32
                assert len(d.get("consumesCounters", [])) <= 2
                for a in d.get("attributes", {}).values():
                    for key in ("string", "version"):
                        assert len(a.get(key, "")) <= 64
        # The kubernetes client's v1 model keeps every field we wrote: nothing unknown, nothing misspelt.
        model = V1ResourceSlice.from_dict(s)
        back = ApiClient().sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
        assert back == s
    assert len(generations) <= 1
    all_devices = devices(slices)
    assert len({d["name"] for d in all_devices}) == len(all_devices), "device names unique in the pool"
    sets = counter_sets(slices)
    for d in all_devices:
        for use in d.get("consumesCounters", []):
            assert use["counterSet"] in sets, f"{d['name']} consumes from a missing set"
            available = sets[use["counterSet"]]
            for counter, value in use["counters"].items():
                assert counter in available, f"{d['name']}: no counter {counter}"
                assert quantity(value["value"]) <= available[counter]


def consumption(device: Json, set_name: str) -> dict[str, int]:
    for use in device.get("consumesCounters") or ():
        if use["counterSet"] == set_name:
            return {k: quantity(v["value"]) for k, v in use["counters"].items()}
    return {}


def fits(group: Sequence[Json], set_name: str, limits: dict[str, int]) -> bool:
    """Whether the devices can be allocated together as far as counter set `set_name` decides."""
    totals: dict[str, int] = {}
    for d in group:
        for k, v in consumption(d, set_name).items():
            totals[k] = totals.get(k, 0) + v
    return all(v <= limits.get(k, 0) for k, v in totals.items())
