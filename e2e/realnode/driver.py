"""The real node's NVIDIA driver: a driver root laid out as the driver's installer leaves a host (versioned
libraries with soname links in usr/lib/x86_64-linux-gnu, tools in usr/bin), holding the fake driver built
from interceptor/fake: libcuda.so.1, libnvidia-ml.so.1, the MPS control tool, and an nvidia-smi script.

The chart mounts the root read-only into the plugin's container (at /driver-root); the plugin loads the fake
libnvidia-ml from there and hands the files to claims' containers by CDI. The fake NVML needs a node file and
a writable state (its MIG instances, which outlive a plugin restart as a GPU's do): the node file is copied
into the root, and the state is a directory of the node bound over `run/fake-nvml` inside the node's mount
namespace, a mount below the read-only one, as the GPU Operator's driver root is a mount of its own.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from dra_driver.vocabulary.names import DRIVER_PROC_ROOT_ENV
from tests.support.doubles.fake_nvml import FAKE_LIBRARY_DIR, NODE_ENV, PROC_ENV, STATE_ENV, FakeNvmlNode
from tests.support.driver_root import LIBRARY_DIR, install_driver

CONTAINER_ROOT = Path("/driver-root")  # where the chart mounts the driver root in the plugin's container
NODE_FILE = Path("etc/fake-nvml/node.yaml")
STATE_DIR = Path("run/fake-nvml")
NVIDIA_SMI = b"""#!/bin/sh
# the fake driver's nvidia-smi: says which GPUs this container was given
echo "NVIDIA-SMI (tessera fake driver)"
ls /dev | grep -E '^nvidia[0-9]+$' | sed 's/^/GPU: \\/dev\\//'
"""


@dataclass(frozen=True, slots=True)
class FakeDriverRoot:
    root: Path  # host path: <node root>/driver
    state_dir: Path  # host path of the fake NVML's state, bound over <root>/run/fake-nvml
    node_file: Path

    @classmethod
    def under(cls, node_root: Path, *, node_file: Path) -> FakeDriverRoot:
        return cls(root=node_root / "driver", state_dir=node_root / "fake-nvml", node_file=node_file)

    def lay_out(self) -> None:
        install_driver(
            self.root,
            sources={
                "libcuda.so.1": FAKE_LIBRARY_DIR / "libcuda.so.1",
                "libnvidia-ml.so.1": FAKE_LIBRARY_DIR / "libnvidia-ml.so.1",
                "nvidia-cuda-mps-control": FAKE_LIBRARY_DIR / "nvidia-cuda-mps-control",
            },
        )
        (self.root / "usr/bin/nvidia-smi").write_bytes(NVIDIA_SMI)
        (self.root / NODE_FILE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.node_file, self.root / NODE_FILE)
        (self.root / STATE_DIR).mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def state_mount(self) -> tuple[Path, Path]:
        """(source, target) of the bind mount the node makes in its mount namespace."""
        return self.state_dir, self.root / STATE_DIR

    def plugin_env(self) -> dict[str, str]:
        """The fake NVML's variables, as the plugin's container sees the root."""
        inside = FakeNvmlNode(node_file=CONTAINER_ROOT / NODE_FILE, state_dir=CONTAINER_ROOT / STATE_DIR)
        variables = inside.variables()
        return {k: variables[k] for k in (NODE_ENV, STATE_ENV, PROC_ENV, DRIVER_PROC_ROOT_ENV)}

    def host_view(self) -> FakeNvmlNode:
        """The fake's state as this process reads it (MIG instances)."""
        return FakeNvmlNode(node_file=self.node_file, state_dir=self.state_dir)

    def mig_cap_minors(self) -> dict[str, tuple[int, int]]:
        """MIG UUID → the (GI, CI) minors of its /dev/nvidia-caps nodes, as the fake's /proc tree shows them
        (the GPU's minor is its position in the node file, as NVML numbers it)."""
        order = [g["uuid"] for g in yaml.safe_load(self.node_file.read_text(encoding="utf-8"))["gpus"]]
        view = self.host_view()
        found: dict[str, tuple[int, int]] = {}
        for gpu in view.state() or ():
            mig = view.proc_root / f"driver/nvidia/capabilities/gpu{order.index(gpu.uuid)}/mig"
            for gi in gpu.gpu_instances:
                for ci in gi.compute_instances:
                    found[ci.uuid] = (
                        _minor(mig / f"gi{gi.id}/access"),
                        _minor(mig / f"gi{gi.id}/ci{ci.id}/access"),
                    )
        return found


def _minor(access: Path) -> int:
    for line in access.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "DeviceFileMinor":
            return int(value)
    raise ValueError(f"{access} names no DeviceFileMinor")


# Where a claim's container finds the driver: at the root's own layout, the library by its soname.
CONTAINER_LIBCUDA = f"/{LIBRARY_DIR}/libcuda.so.1"
CONTAINER_NVIDIA_SMI = "/usr/bin/nvidia-smi"
