"""Every `tessera` subcommand that prints data keeps stdout for its data and puts its log lines on stderr
(issue #35: `tessera inventory -o json | jq` failed on the NVML backend's warnings). Each runs as a
subprocess with a line logged while it works: a real one where the subcommand has one on this input (the NVML
backend's warning about a PCI tree it cannot read, the simulated backend's fault line, cleanup's), a warning
logged as the handler starts otherwise (tests/support/noisy_command.py). The subcommands and their output
formats are read from the command's own parser: a new one, or a new `-o` choice, fails
`test_every_subcommand_and_output_format_is_checked` until it is added here."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.vocabulary.names import SYSFS_ROOT_ENV
from kubelet_plugin.command import build_parser
from tests.support.doubles.fake_nvml import FAKE_NVML_LIBRARY, FakeNvmlNode
from tests.support.noisy_command import EVENT as FORCED
from tests.support.smoke import covers

REPO = Path(__file__).resolve().parents[2]
TESSERA = Path(sys.executable).with_name("tessera")  # the console script `make dev` installs
NODE = REPO / "e2e" / "nodes" / "h100x8.yaml"
HAMI_POD = REPO / "admission" / "examples" / "hami-default-use.yaml"
CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-gpu, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.tessera.dev}
"""
LEFTOVER_UID = "0a6f1e3c-1111-2222-3333-444455556666"
# Subcommands that print no data: what their stdout holds instead.
NO_DATA = {
    ("plugin",): "the node daemon: serves until SIGTERM, logs only",
    ("plugin", "probe"): "the liveness check: its exit status, the reason on stderr",
    ("webhook",): "the admission webhook: serves until SIGTERM, logs only",
    (
        "gpu",
    ): "needs an API server: e2e/scenarios/test_gpu_cordon.py checks its stdout (one line per change, the "
    "list's table) apart from its stderr",
}


def parse_json(out: str) -> None:
    assert json.loads(out)["kind"] == "List"


def parse_yaml(out: str) -> None:
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    assert docs and all(isinstance(d, dict) and "kind" in d for d in docs), out[:400]


def lines_starting(*prefixes: str) -> Callable[[str], None]:
    def parse(out: str) -> None:
        lines = out.splitlines()
        assert lines and all(line.startswith(prefixes) for line in lines), out[:400]

    return parse


def no_log_line(event: str) -> Callable[[str], None]:
    """Free-form text (a summary, an explanation): it holds no log line."""

    def parse(out: str) -> None:
        assert out.strip() and event not in out, out[:400]

    return parse


@dataclass(frozen=True, slots=True)
class Case:
    command: tuple[str, ...]
    output: str | None  # the -o/--output choice, or a flag that picks the output (`--summary`)
    argv: Callable[[Path], list[str]]
    parse: Callable[[str], None]
    logged: str  # an event that must be on stderr
    noisy: bool = False  # run through tests/support/noisy_command.py
    nvml: bool = False  # the NVML backend over the fake library, its PCI tree unreadable
    env: dict[str, str] = field(default_factory=dict)


def _claim(tmp: Path) -> str:
    (tmp / "claim.yaml").write_text(CLAIM)
    return str(tmp / "claim.yaml")


def _leftovers(tmp: Path) -> str:
    """A node root holding a claim directory and a CDI spec of ours that says nothing usable (a warning)."""
    root = tmp / "node"
    (root / "var/lib/tessera/claims" / LEFTOVER_UID).mkdir(parents=True)
    (root / "var/run/cdi").mkdir(parents=True)
    (root / "var/run/cdi" / f"k8s.gpu.tessera.dev-claim_{LEFTOVER_UID}.json").write_text("{}")
    return str(root)


NVML_WARNING = "sysfs.no_pci_device"
CLEANUP_FLAGS = ["--node-name", "n1", "--simulate", str(NODE), "--log-format", "console"]


def _inventory(output: str, parse: Callable[[str], None]) -> Case:
    argv = ["inventory", "-o", output, "--node-name", "n1"]
    return Case(("inventory",), output, lambda t: argv, parse, NVML_WARNING, nvml=True)


def _explain(output: str, parse: Callable[[str], None]) -> Case:
    return Case(
        ("explain",),
        output,
        lambda t: ["explain", _claim(t), "--simulate", str(NODE), "--output", output],
        parse,
        FORCED,
        noisy=True,
    )


def _convert(output: str, parse: Callable[[str], None]) -> Case:
    flags = ["--summary"] if output == "--summary" else ["-o", output]
    return Case(("convert",), output, lambda t: ["convert", *flags, str(HAMI_POD)], parse, FORCED, noisy=True)


CASES = [
    _inventory("json", parse_json),
    _inventory("yaml", parse_yaml),
    _inventory("summary", no_log_line(NVML_WARNING)),
    _explain("json", lambda out: json.loads(out)["requests"]),
    _explain("text", no_log_line(FORCED)),
    _convert("json", parse_json),
    _convert("yaml", parse_yaml),
    _convert("--summary", lines_starting(f"{HAMI_POD}: ", "  ")),
    Case(
        ("sim", "inject"),
        None,
        lambda t: [
            "sim",
            "inject",
            "--node-file",
            str(NODE),
            "--state-file",
            str(t / "s"),
            "--gpu",
            "2",
            "--xid",
            "79",
        ],
        lines_starting("GPU 2 (GPU-"),
        "sim.fault_injected",
    ),
    Case(
        ("cleanup",),
        "--dry-run",
        lambda t: [
            "cleanup",
            "--dry-run",
            "--root",
            _leftovers(t),
            *CLEANUP_FLAGS,
            "--sim-state",
            str(t / "s"),
        ],
        lines_starting("cdi-spec /", "claim-dir /", "directory /"),
        "a CDI spec of ours says nothing usable",
    ),
]


def _case_id(c: Case) -> str:
    return " ".join([*c.command, *([c.output] if c.output else [])])


@pytest.fixture
def clean_env() -> Iterator[dict[str, str]]:
    yield {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "TESSERA_", "NODE_NAME"))}


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@covers(
    "tessera inventory -o json",
    "tessera inventory -o yaml",
    "tessera explain --output json",
    "tessera convert -o json",
    "tessera convert --summary deploy/*.yaml",
    "tessera cleanup --dry-run",
)
def test_data_on_stdout_log_lines_on_stderr(case: Case, tmp_path: Path, clean_env: dict[str, str]) -> None:
    env = {**clean_env, **case.env}
    if case.nvml:
        if not FAKE_NVML_LIBRARY.exists():
            pytest.skip("run `make dev` to build the fake libnvidia-ml")
        env = FakeNvmlNode(node_file=NODE, state_dir=tmp_path / "nvml").env(env)
        env[SYSFS_ROOT_ENV] = str(tmp_path / "no-sysfs")  # the backend cannot place the GPUs: it warns
    command = [sys.executable, "-m", "tests.support.noisy_command"] if case.noisy else [str(TESSERA)]
    done = subprocess.run(
        [*command, *case.argv(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert case.logged in done.stderr, f"the log line is not on stderr:\n{done.stderr[:2000]}"
    case.parse(done.stdout)


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """(path, parser) of every parser below `parser` that runs something."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub.get_default("handler") is not None:
                    yield (*path, name), sub
                yield from _subcommands(sub, (*path, name))


def _outputs(parser: argparse.ArgumentParser) -> set[str]:
    """The choices of its -o/--output; none when it has no such option."""
    for action in parser._actions:
        if action.dest == "output" and action.choices:
            return {str(c) for c in action.choices}
    return set()


def test_every_subcommand_and_output_format_is_checked() -> None:
    checked = {(c.command, c.output) for c in CASES}
    missing = []
    for path, parser in _subcommands(build_parser()):
        if path in NO_DATA:
            continue
        missing += [(path, o) for o in _outputs(parser) if (path, o) not in checked]
        if not any(c.command == path for c in CASES):
            missing.append((path, "any"))
    assert missing == [], "add these to CASES (or to NO_DATA, saying what their stdout holds instead)"
