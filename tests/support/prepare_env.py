"""A Preparer over a GPU backend and a claim directory, all under one tmp dir.

The backend is the simulated one or the NVML one driving the fake libnvidia-ml in this process
(`BACKENDS`); both describe the same node file.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.backends import open_backend
from dra_driver.backends.base import GpuBackend
from dra_driver.core.families import mig
from dra_driver.core.families.base import NO_SETTINGS, FamilySettings
from dra_driver.core.families.mig import MigRecord
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import CONFIG_API_VERSION, DRIVER_NAME, ClaimUID
from kubelet_plugin.claims.api import NullClaimStatusWriter
from kubelet_plugin.claims.node_state import NodeInputs, NodeState
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.record.steps import NO_OBSERVER
from tests.support.claim_files import DirectoryClaimSource
from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL
from tests.support.doubles.fake_nvml import FakeNvmlNode, pynvml_on_fake
from tests.support.faults import Faults
from tests.support.swept_dirs import swept_names

BACKENDS = ("simulated", "nvml")
POOL = "node-a"
BOOT = "boot-1"
# GPUs 0, 1: H100 (Tessera toggles MIG mode); GPU 2: A100 with MIG mode on (set by an administrator).
NODE_YAML = f"""apiVersion: sim.tessera.dev/v1
kind: SimulatedNode
nodeName: {POOL}
gpus:
- product: H100-80GB-SXM
  count: 2
- product: A100-SXM4-80GB
  migEnabled: true
"""


def result(
    device: str, *, request: str = "gpu", pool: str = POOL, driver: str = DRIVER_NAME, **extra: Any
) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def vgpu(
    gpu: int, *, memory: str = "10Gi", cores: str = "50", request: str = "gpu", virtual: str | None = None
) -> dict[str, Any]:
    consumed = {"memory": memory, "cores": cores}
    if virtual is not None:  # host-backed memory, on a node with memoryOversubscription
        consumed["virtualMemory"] = virtual
    return result(
        f"gpu-{gpu}-vgpu",
        request=request,
        shareID=uuidlib.uuid4().hex[:8],
        consumedCapacity=consumed,
    )


def opaque(
    kind: str, *, requests: Sequence[str] = (), source: str = "FromClaim", **fields: Any
) -> dict[str, Any]:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {
            "driver": DRIVER_NAME,
            "parameters": {"apiVersion": CONFIG_API_VERSION, "kind": kind, **fields},
        },
    }


def claim(
    name: str, *results: Mapping[str, Any], configs: Sequence[Mapping[str, Any]] = (), namespace: str = "ns"
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuidlib.uuid4())},
        "spec": {
            "devices": {
                "requests": [{"name": r["request"], "exactly": {"deviceClassName": "x"}} for r in results]
            }
        },
        "status": {"allocation": {"devices": {"results": list(results), "config": list(configs)}}},
    }


def ref(c: Mapping[str, Any]) -> ClaimRef:
    m = c["metadata"]
    return ClaimRef(namespace=m["namespace"], name=m["name"], uid=ClaimUID(m["uid"]))


@dataclass
class Env:
    root: Path
    node_file: Path
    state_file: Path
    paths: PluginPaths
    claims: DirectoryClaimSource
    backend: GpuBackend
    nvml: bool = False

    @classmethod
    def create(cls, root: Path, *, nvml: bool = False, node_yaml: str = NODE_YAML) -> Env:
        """`nvml`: the NVML backend, inside `pynvml_on_fake` with `fake_nvml(root)`'s variables."""
        node_file = root / "node.yaml"
        node_file.write_text(node_yaml)
        state_file = root / "sim-state.json"
        env = cls(
            root=root,
            node_file=node_file,
            state_file=state_file,
            paths=PluginPaths.under(root / "host"),
            claims=DirectoryClaimSource(root=root / "claims"),
            backend=open_backend(simulate=node_file, state_file=state_file) if not nvml else _nvml(),
            nvml=nvml,
        )
        return env

    def open_backend(self) -> GpuBackend:
        """Another backend on the same GPUs, as a restarted daemon opens."""
        return _nvml() if self.nvml else open_backend(simulate=self.node_file, state_file=self.state_file)

    def preparer(
        self, *, faults: Faults | None = None, boot_id: str = BOOT, settings: FamilySettings = NO_SETTINGS
    ) -> Preparer:
        """`faults`: the observer of its steps (none: a production preparer); `settings`: the node's family
        settings (memoryOversubscription, ...)."""
        steps = faults if faults is not None else NO_OBSERVER
        state = NodeState(
            NodeInputs(
                backend=self.open_backend(),
                paths=self.paths,
                steps=steps,
                host_options={"mps_control": str(FAKE_MPS_CONTROL)},
                boot_id=boot_id,
            )
        )
        return Preparer(
            state=state,
            claims=self.claims,
            status=NullClaimStatusWriter(),
            pool_name=POOL,
            driver_library_dirs=("/usr/lib/nvidia",),
            settings=settings,
        )

    def put(self, *claims: Mapping[str, Any]) -> list[ClaimRef]:
        for c in claims:
            self.claims.put(c)
        return [ref(c) for c in claims]

    # ---- what is on the node -------------------------------------------------------------------

    def inventory(self) -> Inventory:
        return self.backend.inventory()

    def cdi_files(self) -> list[str]:
        d = self.paths.cdi_dir
        return sorted(p.name for p in d.iterdir()) if d.exists() else []

    def claim_dirs(self) -> list[str]:
        """The claims root once the background sweepers removed what was set aside (10 s at most)."""
        return swept_names(self.paths.claims_dir)

    def checkpoint(self) -> Checkpoint:
        from kubelet_plugin.record.checkpoint_store import CheckpointStore  # noqa: PLC0415

        return CheckpointStore(path=self.paths.checkpoint_file).load(boot_id="none")

    def mig(self) -> list[tuple[int, str, int]]:
        return [(g.index, m.profile_name, m.start) for g in self.inventory().gpus for m in g.mig_instances]

    def mig_modes(self) -> list[bool]:
        return [g.mig_enabled for g in self.inventory().gpus]

    def has_traces_of(self, uid: str) -> list[str]:
        """Everything left on the node that names the claim."""
        found = [f for f in self.cdi_files() if uid in f] + [d for d in self.claim_dirs() if uid in d]
        if uid in self.checkpoint().claims:
            found.append("checkpoint entry")
        return found


def mig_records(entry: ClaimEntry) -> tuple[MigRecord, ...]:
    return tuple(r for r in entry.of(mig.NAME) if isinstance(r, MigRecord))


def _nvml() -> GpuBackend:
    return open_backend(simulate=None, state_file=None)


def fake_nvml(root: Path) -> FakeNvmlNode:
    return FakeNvmlNode(node_file=root / "node.yaml", state_dir=root / "fake-nvml")


@contextmanager
def backend_env(root: Path, backend: str) -> Iterator[Env]:
    """An Env on `backend` (one of BACKENDS)."""
    if backend == "nvml":
        with pynvml_on_fake(fake_nvml(root)):
            yield Env.create(root, nvml=True)
    else:
        yield Env.create(root)
