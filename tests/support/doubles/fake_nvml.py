"""The fake `libnvidia-ml.so.1` (interceptor/build/fake) as a node's GPU driver, for tests and the demo.

A `FakeNvmlNode` is a SimulatedNode file driven through NVML: `env()` is what a process needs to run
Tessera's NVML backend over it (the library on LD_LIBRARY_PATH, the node file, the fake's MIG state file,
/proc and sysfs trees, and the backend's /proc and sysfs roots pointing there); `read_state()` reads the
fake's state file, as the simulated backend's state file is read; `pynvml_on_fake()` makes pynvml drive the
fake inside the calling process (tests that would otherwise start a process per check).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pynvml
import yaml

from dra_driver.backends.decoding import check_fields, check_header, expect_list, expect_mapping, get_typed
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.vocabulary.errors import ConfigError, StorageError
from dra_driver.vocabulary.names import DRIVER_PROC_ROOT_ENV, SYSFS_ROOT_ENV

REPO_ROOT = Path(__file__).resolve().parents[3]
FAKE_LIBRARY_DIR = REPO_ROOT / "interceptor" / "build" / "fake"
FAKE_NVML_LIBRARY = FAKE_LIBRARY_DIR / "libnvidia-ml.so.1"

# The fake's variables (interceptor/fake/fake_nvml.c) and state file format (interceptor/fake/nvml/state.c).
NODE_ENV = "FAKE_NVML_NODE"
STATE_ENV = "FAKE_NVML_STATE"
PROC_ENV = "FAKE_NVML_PROC"
SYS_ENV = "FAKE_NVML_SYS"
STATE_API_VERSION = "fake.tessera.dev/v1"
STATE_KIND = "FakeNvmlState"
# SimulatedNode fields the fake reads and checks but cannot show through NVML, with why. Everything else in
# a node file means the same to both backends (tests/integration/test_nvml_backend.py compares them).
SIMULATED_ONLY_FIELDS = {
    "healthy": "a GPU's health: the NVML backend reads none (no XID events), so an unhealthy simulated GPU "
    "keeps its devices on the NVML path",
}


@dataclass(frozen=True, slots=True)
class FakeComputeInstance:
    id: int
    profile_id: int
    uuid: str


@dataclass(frozen=True, slots=True)
class FakeGpuInstance:
    id: int
    profile_id: int
    start: int
    size: int
    compute_instances: tuple[FakeComputeInstance, ...]


@dataclass(frozen=True, slots=True)
class FakeGpuState:
    uuid: str
    mig_current: bool
    mig_pending: bool
    gpu_instances: tuple[FakeGpuInstance, ...]


def _decode_ci(raw: object, where: str) -> FakeComputeInstance:
    data = expect_mapping(raw, where)
    check_fields(data, where, required={"id", "profileId", "uuid"}, optional=set())
    return FakeComputeInstance(
        id=get_typed(data, "id", int, where, 0),
        profile_id=get_typed(data, "profileId", int, where, 0),
        uuid=get_typed(data, "uuid", str, where, ""),
    )


def _decode_gi(raw: object, where: str) -> FakeGpuInstance:
    data = expect_mapping(raw, where)
    fields = {"id", "profileId", "start", "size", "computeInstances"}
    check_fields(data, where, required=fields, optional=set())
    cis = expect_list(data["computeInstances"], f"{where}.computeInstances")
    return FakeGpuInstance(
        id=get_typed(data, "id", int, where, 0),
        profile_id=get_typed(data, "profileId", int, where, 0),
        start=get_typed(data, "start", int, where, 0),
        size=get_typed(data, "size", int, where, 0),
        compute_instances=tuple(_decode_ci(c, f"{where}.computeInstances[{k}]") for k, c in enumerate(cis)),
    )


def decode_state(raw: object) -> tuple[FakeGpuState, ...]:
    data = expect_mapping(raw, "state")
    check_fields(data, "", required={"apiVersion", "kind", "gpus"}, optional=set())
    check_header(data, "", api_version=STATE_API_VERSION, kind=STATE_KIND)
    gpus = []
    for n, raw_gpu in enumerate(expect_list(data["gpus"], "gpus")):
        where = f"gpus[{n}]"
        g = expect_mapping(raw_gpu, where)
        check_fields(g, where, required={"uuid", "migCurrent", "migPending", "gpuInstances"}, optional=set())
        gis = expect_list(g["gpuInstances"], f"{where}.gpuInstances")
        gpus.append(
            FakeGpuState(
                uuid=get_typed(g, "uuid", str, where, ""),
                mig_current=get_typed(g, "migCurrent", int, where, 0) == 1,
                mig_pending=get_typed(g, "migPending", int, where, 0) == 1,
                gpu_instances=tuple(_decode_gi(x, f"{where}.gpuInstances[{k}]") for k, x in enumerate(gis)),
            )
        )
    return tuple(gpus)


def read_state(path: Path) -> tuple[FakeGpuState, ...] | None:
    """The fake's MIG state, or None before any process initialised NVML on the node."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return decode_state(yaml.safe_load(text))
    except (yaml.YAMLError, ConfigError) as e:
        raise StorageError(f"fake NVML state {path} is unreadable: {e}") from e


@dataclass(frozen=True, slots=True)
class FakeNvmlNode:
    """A node file served by the fake NVML library, its state kept under `state_dir`."""

    node_file: Path
    state_dir: Path

    @property
    def state_file(self) -> Path:
        return self.state_dir / "nvml-state.yaml"

    @property
    def proc_root(self) -> Path:
        return self.state_dir / "proc"

    @property
    def sysfs_root(self) -> Path:
        """The fake's sysfs tree (the GPUs' PCI entries: root complex, NUMA node), written at nvmlInit."""
        return self.state_dir / "sys"

    def lost_marker(self, uuid: str) -> Path:
        """While this file exists, the fake answers GPU_IS_LOST for GPU `uuid` (it fell off the bus)."""
        return self.state_dir / f"lost-{uuid}"

    def variables(self) -> dict[str, str]:
        """The fake's variables and the backend's /proc and sysfs roots (no library path)."""
        return {
            NODE_ENV: str(self.node_file),
            STATE_ENV: str(self.state_file),
            PROC_ENV: str(self.proc_root),
            SYS_ENV: str(self.sysfs_root),
            DRIVER_PROC_ROOT_ENV: str(self.proc_root),
            SYSFS_ROOT_ENV: str(self.sysfs_root),
        }

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) for a process that loads the fake as its NVML."""
        env = dict(os.environ if base is None else base)
        library_path = [str(FAKE_LIBRARY_DIR), *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
        env["LD_LIBRARY_PATH"] = ":".join(library_path)
        env.update(self.variables())
        return env

    def state(self) -> tuple[FakeGpuState, ...] | None:
        return read_state(self.state_file)

    def mig_instances(self) -> list[tuple[str, str]]:
        """(GPU UUID, MIG UUID) of every live compute instance."""
        return [
            (g.uuid, ci.uuid)
            for g in self.state() or ()
            for gi in g.gpu_instances
            for ci in gi.compute_instances
        ]


def require_library() -> Path:
    if not FAKE_NVML_LIBRARY.exists():
        raise FileNotFoundError(f"{FAKE_NVML_LIBRARY} is not built: run `make -C interceptor`")
    return FAKE_NVML_LIBRARY


@contextmanager
def pynvml_on_fake(node: FakeNvmlNode) -> Iterator[ctypes.CDLL]:
    """pynvml, in this process, on the fake library with `node`'s variables; afterwards NVML is shut down,
    pynvml forgets the library and the environment is restored. The library is loaded by path and has no
    soname, so a later `CDLL("libnvidia-ml.so.1")` elsewhere still finds no driver."""
    saved = {k: os.environ.get(k) for k in node.variables()}
    os.environ.update(node.variables())
    lib = ctypes.CDLL(str(require_library()))
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        yield lib
    finally:
        _shut_down_completely()
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def backend_on_fake(node_file: Path, state_dir: Path) -> Iterator[NvmlBackend]:
    """Tessera's NVML backend over the fake library serving `node_file` (its state in `state_dir`, made
    here), closed afterwards."""
    node = FakeNvmlNode(node_file=node_file, state_dir=state_dir)
    node.state_dir.mkdir()
    with pynvml_on_fake(node):
        backend = NvmlBackend.open()
        try:
            yield backend
        finally:
            backend.close()


def _shut_down_completely() -> None:
    """Every nvmlInit balanced, whatever backends a test left open."""
    while True:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            return


def reset_gpu(lib: ctypes.CDLL, index: int) -> int:
    """What an administrator's GPU reset does: a pending MIG mode takes effect (NVML return code)."""
    result: int = lib.fakeNvmlResetGpu(ctypes.c_uint(index))
    return result
