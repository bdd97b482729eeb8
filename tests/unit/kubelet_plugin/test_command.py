"""`tessera` (kubelet_plugin.command) starts light: importing it loads no subcommand's module, running one
loads that one's alone, and the help it prints from its table is the help of the subcommands' own parsers."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver import cli
from kubelet_plugin.command import PROBE_COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[3]
# what each subcommand's module pulls in; no `tessera` process needs them before its subcommand runs
HEAVY = (
    "admission.cli",
    "admission.convert",
    "kubelet_plugin.daemon",
    "kubelet_plugin.cleanup",
    "kubelet_plugin.host_parts",
    "dra_driver.backends.simulated",
    "dra_driver.cli.inventory",
    "dra_driver.core.families",
    "structlog",
    "yaml",
    "kubernetes",
    "grpc",
)
COLUMNS = "100"  # argparse wraps help to the terminal's width


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _loaded(modules: set[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


def test_importing_the_entry_point_loads_no_subcommand_module() -> None:
    modules = _modules_after("import kubelet_plugin.command")
    assert "kubelet_plugin.command" in modules
    assert [p for p in HEAVY if _loaded(modules, p)] == []


def test_a_subcommand_loads_its_own_module_and_no_other() -> None:
    modules = _modules_after(
        "from kubelet_plugin.command import main\n"
        "try:\n    main(['sim', '--help'])\nexcept SystemExit:\n    pass"
    )
    assert "dra_driver.backends.sim_inject" in modules
    others = ("admission.cli", "kubelet_plugin.daemon", "dra_driver.cli.inventory", "dra_driver.explain.cli")
    assert [p for p in others if _loaded(modules, p)] == []


def test_a_tessera_process_does_not_load_rich() -> None:
    """structlog's console renderer uses `rich` wherever it is installed (100 ms of every start): the dev
    tool that brings it (import-linter) lives in its own venv (`make lint`), and the image has none."""
    modules = _modules_after(
        "from kubelet_plugin.command import main\n"
        f"main(['inventory', '--simulate', '{ROOT / 'e2e/nodes/h100x8.yaml'}', '-o', 'json'])"
    )
    assert "structlog" in modules  # the subcommand ran and configured its logging
    assert not _loaded(modules, "rich")


def test_the_liveness_probe_loads_neither_the_daemon_nor_the_host_parts(tmp_path: Path) -> None:
    """`tessera plugin probe` with the chart's arguments, every 30 s on every node: it runs (and finds no
    socket here), without the daemon, the host parts whose flags `tessera plugin` reads, their metrics, or
    structlog (it logs nothing: its one line goes to stderr itself)."""
    modules = _modules_after(
        "from kubelet_plugin.command import main\n"
        f"assert main(['plugin', 'probe', '--kubelet-plugins-dir={tmp_path}/plugins',"
        f" '--kubelet-registry-dir={tmp_path}/registry']) == 1"
    )
    assert "kubelet_plugin.serving.probe" in modules and "grpc" in modules  # the probe ran
    unneeded = (
        "kubelet_plugin.daemon",
        "kubelet_plugin.host_parts",
        "kubelet_plugin.metrics",
        "prometheus_client",
        "dra_driver.core",
        "cdi",
        "yaml",
        "kubernetes",
        "structlog",
    )
    assert [p for p in unneeded if _loaded(modules, p)] == []


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--kubelet-plugins-dir=/var/lib/kubelet/plugins", "--kubelet-registry-dir=/var/lib/kubelet/r"],
        ["--root", "/tmp/t", "--pod-uid", "p-1", "--timeout", "2.5", "--ready", "--cdi-dir", "/c"],
    ],
    ids=["bare", "chart", "every-flag"],
)
def test_the_probes_own_parser_reads_what_the_whole_one_reads(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tessera plugin probe` is parsed without the daemon's flags: every value it gets is the one the whole
    parser gives, and it asks `tessera` to leave logging alone either way."""
    monkeypatch.setenv("POD_UID", "from-env")
    whole = vars(build_parser().parse_args(["plugin", "probe", *args]))
    alone = vars(cli.build_parser(PROBE_COMMANDS, only="plugin").parse_args(["plugin", "probe", *args]))
    assert alone == {k: whole[k] for k in alone}
    assert {"handler", "root", "pod_uid", "timeout", "ready", "logs"} <= alone.keys()
    assert alone["logs"] is False


def _paths(parser: argparse.ArgumentParser, above: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield above
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _paths(sub, (*above, name))


def _full_help(path: tuple[str, ...]) -> str:
    """The help of every subcommand's whole parser, built as the old `tessera` built it."""
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser.format_help()


@pytest.fixture
def columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", COLUMNS)


@pytest.mark.usefixtures("columns")
@pytest.mark.parametrize("path", list(_paths(build_parser())), ids=lambda p: " ".join(p) or "tessera")
def test_help_is_the_subcommands_own(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """`tessera --help` (names and help from the light table) and `tessera SUB ... --help` print what the
    whole parser prints."""
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == _full_help(path)


@pytest.mark.usefixtures("columns")
def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    expected = ("inventory", "plugin", "cleanup", "convert", "webhook", "explain", "gpu", "sim")
    assert "{" + ",".join(expected) + "}" in shown
    assert all(f"\n    {name} " in shown for name in expected)


@pytest.mark.usefixtures("columns")
@pytest.mark.parametrize(("command", "other"), [("convert", "webhook"), ("webhook", "convert")])
def test_a_subcommands_help_tells_of_it_alone(
    command: str, other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The admission component's two commands share a module: each one's help is its own, with nothing of
    the module's insides (its description once printed the module's notes and the other command's name)."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    assert f"`tessera {command}" in shown
    assert f"tessera {other}" not in shown and "parser" not in shown
