"""Where the node daemon keeps and finds things on the host; one root can relocate all of it for tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dra_driver.vocabulary.names import (
    DRIVER_NAME,
    ClaimUID,
    cdi_spec_file_name,
    dra_socket_name,
    ready_file_name,
    registration_socket_name,
)


@dataclass(frozen=True, slots=True)
class PluginPaths:
    plugin_dir: Path  # /var/lib/kubelet/plugins/<driver>: DRA socket, checkpoint, locks
    registry_dir: Path  # /var/lib/kubelet/plugins_registry: registration socket
    cdi_dir: Path  # /var/run/cdi: one transient spec per claim
    claims_dir: Path  # host side of the per-claim directories (limits file, accounting region)
    gpus_dir: (
        Path  # one directory per shared GPU: its view (schedule, priority holds), read-only in containers
    )
    library_path: Path  # host path of libtessera.so, mounted read-only into vgpu containers
    state_dir: Path  # /var/lib/tessera: the host parts keep their directories below it (`family_dir`)
    pod_uid: str | None = None  # set during rolling updates: sockets get per-pod names

    @classmethod
    def defaults(cls, *, pod_uid: str | None = None) -> PluginPaths:
        return cls(
            plugin_dir=Path("/var/lib/kubelet/plugins") / DRIVER_NAME,
            registry_dir=Path("/var/lib/kubelet/plugins_registry"),
            cdi_dir=Path("/var/run/cdi"),
            claims_dir=Path("/var/lib/tessera/claims"),
            gpus_dir=Path("/var/lib/tessera/gpus"),
            library_path=Path("/var/lib/tessera/lib/libtessera.so"),
            state_dir=Path("/var/lib/tessera"),
            pod_uid=pod_uid,
        )

    @classmethod
    def under(cls, root: Path, *, pod_uid: str | None = None) -> PluginPaths:
        """The same layout below `root` (tests, the e2e stand-in nodes)."""
        return cls(
            plugin_dir=root / "var/lib/kubelet/plugins" / DRIVER_NAME,
            registry_dir=root / "var/lib/kubelet/plugins_registry",
            cdi_dir=root / "var/run/cdi",
            claims_dir=root / "var/lib/tessera/claims",
            gpus_dir=root / "var/lib/tessera/gpus",
            library_path=root / "var/lib/tessera/lib/libtessera.so",
            state_dir=root / "var/lib/tessera",
            pod_uid=pod_uid,
        )

    def family_dir(self, family: str) -> Path:
        """A host part's own directory (the MPS control daemons' for `mps`), unless its flags say another."""
        return self.state_dir / family

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / dra_socket_name(self.pod_uid)

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / registration_socket_name(self.pod_uid)

    @property
    def ready_file(self) -> Path:
        """Written while this instance is registered and published (kubelet_plugin.serving.readiness)."""
        return self.plugin_dir / ready_file_name(self.pod_uid)

    @property
    def checkpoint_file(self) -> Path:
        return self.plugin_dir / "checkpoint.json"

    @property
    def lock_file(self) -> Path:
        """Held by every kubelet call that changes the node, in every instance (node/sockets.py)."""
        return self.plugin_dir / "plugin.lock"

    @property
    def checkpoint_lock_file(self) -> Path:
        """Held, briefly, by every save of the checkpoint and every write of a node-wide file derived from
        it, in every instance (claims/node_state.py)."""
        return self.plugin_dir / "checkpoint.lock"

    @property
    def loops_lock_file(self) -> Path:
        """Held by the one instance on the node that runs the loops writing node-wide files (the GPU views'
        arbiter and relay) for as long as it runs (node/leader_lock.py)."""
        return self.plugin_dir / "loops.lock"

    @property
    def lock_files(self) -> tuple[Path, ...]:
        return (self.lock_file, self.checkpoint_lock_file, self.loops_lock_file)

    # ClaimUID(...) again: where a UID becomes a path, a plain str that slipped past the types is checked too
    def cdi_spec_file(self, claim_uid: ClaimUID) -> Path:
        return self.cdi_dir / cdi_spec_file_name(ClaimUID(claim_uid))

    def claim_dir(self, claim_uid: ClaimUID) -> Path:
        return self.claims_dir / ClaimUID(claim_uid)
