"""The daemon's command line: options → paths, and clear refusals of incomplete command lines."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dra_driver.core.families import mps
from kubelet_plugin.command import build_parser
from kubelet_plugin.daemon import add_arguments, options_from
from kubelet_plugin.host_parts import mps as mps_host
from kubelet_plugin.serving.options import DaemonOptions


def parse(*argv: str) -> DaemonOptions:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from(parser.parse_args(list(argv)))


def test_root_relocates_every_path(tmp_path: Path) -> None:
    options = parse("--node-name", "node-a", "--root", str(tmp_path), "--pod-uid", "p1")
    paths = options.paths()
    for p in (paths.plugin_dir, paths.registry_dir, paths.cdi_dir, paths.claims_dir, paths.library_path,
              paths.family_dir(mps.NAME)):  # fmt: skip
        assert p.is_relative_to(tmp_path)
    assert paths.dra_socket.name == "dra-p1.sock"
    assert paths.registration_socket.name == "gpu.tessera.dev-p1-reg.sock"


def test_defaults_are_the_kubelet_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_UID", raising=False)
    paths = parse("--node-name", "node-a").paths()
    assert str(paths.dra_socket) == "/var/lib/kubelet/plugins/gpu.tessera.dev/dra.sock"
    assert str(paths.registration_socket) == "/var/lib/kubelet/plugins_registry/gpu.tessera.dev-reg.sock"


def test_environment_supplies_node_name_and_pod_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    monkeypatch.setenv("POD_UID", "pod-9")
    options = parse()
    assert (options.node_name, options.pod_uid) == ("from-env", "pod-9")


def test_library_path_and_driver_dirs(tmp_path: Path) -> None:
    options = parse(
        "--node-name", "n", "--root", str(tmp_path), "--library-path", "/opt/t/libtessera.so",
        "--driver-library-dir", "/usr/lib/x86_64-linux-gnu", "--driver-library-dir", "/usr/bin",
    )  # fmt: skip
    assert options.paths().library_path == Path("/opt/t/libtessera.so")
    assert options.driver_library_dirs == (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/bin"))


def test_the_host_parts_flags_reach_them() -> None:
    """--mps-* are the MPS host part's own flags (kubelet_plugin.host_parts.mps.OPTIONS): parsed with the
    rest, handed to it by their dest, read by it alone."""
    assert parse("--node-name", "n").host_options == ()  # the driver root's tool, else PATH
    given = parse("--node-name", "n", "--mps-control", "/opt/nv/nvidia-cuda-mps-control")
    assert given.host_options == (("mps_control", "/opt/nv/nvidia-cuda-mps-control"),)
    default = parse("--node-name", "n")
    control = mps_host.control_of(options=dict(default.host_options), driver_root=None, paths=default.paths())
    assert str(control.root) == "/var/lib/tessera/mps"
    moved = parse("--node-name", "n", "--root", "/r", "--mps-dir", "/run/mps")
    control = mps_host.control_of(options=dict(moved.host_options), driver_root=None, paths=moved.paths())
    assert (control.root, moved.paths().claims_dir) == (Path("/run/mps"), Path("/r/var/lib/tessera/claims"))


def test_incomplete_command_lines_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit, match="--node-name is required"):
        parse()
    with pytest.raises(SystemExit, match="--sim-state needs --simulate"):
        parse("--node-name", "n", "--sim-state", "/tmp/state.json")


def test_tessera_plugin_subcommand_is_wired() -> None:
    args = build_parser().parse_args(
        ["plugin", "--node-name", "n", "--simulate", "node.yaml", "--no-publish"]
    )
    assert args.command == "plugin"
    assert options_from(args).publish is False
    assert callable(args.handler)


def test_test_only_flags_are_not_the_daemons(capsys: pytest.CaptureFixture[str]) -> None:
    # claims from a directory are for tests: `python -m tests.support.daemon` adds that flag
    with pytest.raises(SystemExit):
        parse("--node-name", "n", "--claims-dir-source", "/tmp/claims")
    assert "unrecognized arguments: --claims-dir-source" in capsys.readouterr().err


def test_host_directories_follow_the_charts_host_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_UID", raising=False)
    paths = parse(
        "--node-name", "n", "--kubelet-plugins-dir", "/k/plugins", "--kubelet-registry-dir", "/k/registry",
        "--cdi-dir", "/run/cdi", "--claims-dir", "/t/claims", "--gpus-dir", "/t/gpus",
    ).paths()  # fmt: skip
    assert str(paths.dra_socket) == "/k/plugins/gpu.tessera.dev/dra.sock"
    assert str(paths.registration_socket) == "/k/registry/gpu.tessera.dev-reg.sock"
    assert (paths.cdi_dir, paths.claims_dir, paths.gpus_dir) == (
        Path("/run/cdi"), Path("/t/claims"), Path("/t/gpus"),
    )  # fmt: skip
    assert paths.ready_file == Path("/k/plugins/gpu.tessera.dev/.ready")


def test_relative_host_directories_and_a_mount_without_a_root_are_refused() -> None:
    with pytest.raises(SystemExit, match="--cdi-dir: run/cdi is not an absolute path"):
        parse("--node-name", "n", "--cdi-dir", "run/cdi")
    with pytest.raises(SystemExit, match="--driver-root-mount needs --driver-root"):
        parse("--node-name", "n", "--driver-root-mount", "/driver-root")


def test_driver_root_options() -> None:
    options = parse("--node-name", "n", "--driver-root", "auto", "--driver-root-mount", "/driver-root")
    assert (options.driver_root, options.driver_root_mount) == ("auto", Path("/driver-root"))
