"""The stand-in's kubelet side against the real node plugin daemon (claims from a directory, no API server):
registration and version choice, prepare, CDI injection as a runtime does it, unprepare, re-registration
after a plugin restart."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.kubelet_standin.cdi_registry import CdiRegistry
from e2e.kubelet_standin.plugins import ClaimKey, PluginRegistry
from tests.support.sample_claims import vgpu_claim

REPO = Path(__file__).resolve().parents[3]
NODE = "sim-h100x8"


def start_plugin(root: Path, claims: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.daemon",
            f"--node-name={NODE}",
            f"--root={root}",
            f"--simulate={REPO / 'e2e/nodes/h100x8.yaml'}",
            f"--sim-state={root / 'sim.json'}",
            f"--claims-dir-source={claims}",
            "--no-publish",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=(root / "plugin.log").open("ab"),
    )


@pytest.fixture
def node() -> Iterator[tuple[Path, Path]]:
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path is too deep for the plugin's sockets.
    base = Path(tempfile.mkdtemp(prefix="standin-"))
    root, claims = base / "root", base / "claims"
    library = root / "var/lib/tessera/lib/libtessera.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    (claims / "ns").mkdir(parents=True)
    try:
        yield root, claims
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_register_prepare_inject_unprepare_and_reregister(node: tuple[Path, Path]) -> None:
    root, claims = node
    claim = vgpu_claim("c1", pool=NODE, memory="3000Mi", cores="30", namespace="ns")
    (claims / "ns" / "c1.yaml").write_text(yaml.safe_dump(claim))
    key = ClaimKey(namespace="ns", name="c1", uid=claim["metadata"]["uid"])
    registry = PluginRegistry(registry_dir=root / "var/lib/kubelet/plugins_registry")
    cdi = CdiRegistry(spec_dirs=[root / "etc/cdi", root / "var/run/cdi"])
    plugin = start_plugin(root, claims)
    try:
        connection = registry.wait_for("gpu.tessera.dev", timeout_s=30)
        assert connection.version == "v1"
        (answer,) = connection.prepare([key]).values()
        assert answer.error == ""
        (device,) = answer.devices
        assert device.device == "gpu-0-vgpu" and device.request_names == ("gpu",)
        config = cdi.inject(device.cdi_device_ids)
        assert config.env_map()["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
        assert "/dev/nvidia0" in config.device_paths()

        plugin.terminate()
        plugin.wait(timeout=30)
        registry.scan()
        with pytest.raises(Exception, match="not registered"):
            registry.connection("gpu.tessera.dev")
        plugin = start_plugin(root, claims)
        connection = registry.wait_for("gpu.tessera.dev", timeout_s=30)
        # Prepared before the restart: the spec is still there and a repeated prepare answers the same.
        assert cdi.inject(device.cdi_device_ids).env_map() == config.env_map()
        (again,) = connection.prepare([key]).values()
        assert again.devices == answer.devices

        assert connection.unprepare([key]) == {key.uid: ""}
        assert not list((root / "var/run/cdi").glob("*.json"))
        with pytest.raises(Exception, match="unresolvable"):
            cdi.inject(device.cdi_device_ids)
    finally:
        plugin.terminate()
        plugin.wait(timeout=30)
        registry.close()
