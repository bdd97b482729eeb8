"""Every command the documentation names runs, in a smoke form, whenever `make test` runs (tests/README.md,
"Smoke forms"), so none can rot unseen.

The commands are read from the README, docs/ and every folder's README: each `make …` and `tessera …` in
inline code or a code block. A `make` target is covered when `make test` makes it itself (its dry run is part
of `make test`'s: dev, lint, image, …) or a test is marked `covers("make <target>")`; a variable that picks
another code path (NVML=fake, K8S_VERSION=…) must be in the marker too, one that only sizes a run (NODES=…)
need not. A `tessera` invocation is covered when a test's marker names the same subcommand with at least its
flags. The markers are read from the test sources (tests/support/smoke.py), not from a collection, so this
test needs no control plane; and every marker must name a real target, subcommand and flag."""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from kubelet_plugin.command import build_parser
from tests.support.smoke import make_env

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    {ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"), *ROOT.glob("*/*/README.md")}
)
TEST_SOURCES = sorted(p for d in ("tests", "e2e") for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)
# make variables that choose a different code path; the others only size or select parts of a run
PATH_VARIABLES = frozenset({"NVML", "K8S_VERSION"})
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
SHELL_STOP = frozenset({"|", "||", "&&", ";", ">", ">>", "2>", "#", "\\"})
TARGET_LINE = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?!=)", re.M)


@dataclass(frozen=True, slots=True)
class MakeCommand:
    directory: str  # "" for the repository's Makefile, else the folder whose Makefile it is
    target: str
    variables: frozenset[str]  # the path-choosing ones

    def __str__(self) -> str:
        where = f"-C {self.directory} " if self.directory else ""
        return f"make {where}{self.target}" + "".join(f" {v}=…" for v in sorted(self.variables))


@dataclass(frozen=True, slots=True)
class TesseraCommand:
    path: tuple[str, ...]  # the subcommand: ("plugin", "probe"); () for `tessera --help`
    flags: frozenset[str]

    def __str__(self) -> str:
        return " ".join(["tessera", *self.path, *sorted(self.flags)])


@cache
def targets(directory: str) -> frozenset[str]:
    return frozenset(TARGET_LINE.findall((ROOT / directory / "Makefile").read_text()))


@cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse_make(words: list[str], folder: str) -> Iterator[MakeCommand]:
    """`make [-s] [-C DIR] [VAR=value…] TARGET…` from the words after `make`; `folder` is where the doc lives
    (a folder README's `make bench` is that folder's Makefile's, when it has one)."""
    directory = folder if folder and (ROOT / folder / "Makefile").exists() else ""
    found: list[str] = []
    variables: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-C" and i + 1 < len(words):
            directory, i = words[i + 1].strip("/"), i + 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        name, eq, _ = word.partition("=")
        if eq and re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            variables.add(name)
        elif word in targets(directory):
            found.append(word)
        else:
            break
        i += 1
    for target in found:
        yield MakeCommand(directory, target, frozenset(variables & PATH_VARIABLES))


def parse_tessera(words: list[str]) -> TesseraCommand | None:
    """`tessera SUBCOMMAND… [flags]` from the words after `tessera`; None when they name no subcommand (the
    chart's name in `helm install tessera …`)."""
    parser = _parser()
    path: tuple[str, ...] = ()
    rest = list(words)
    while rest and rest[0] in _subparsers(parser):
        parser = _subparsers(parser)[rest[0]]
        path = (*path, rest.pop(0))
    flags = frozenset(w.split("=", 1)[0] for w in rest if w.startswith("-") and w != "-")
    if not path and not (flags and flags <= {"--help", "-h"}):
        return None
    return TesseraCommand(path, flags)


def commands_in(text: str, folder: str = "") -> Iterator[MakeCommand | TesseraCommand]:
    try:
        words = shlex.split(text.replace("…", " "), comments=False, posix=True)
    except ValueError:
        words = text.split()
    words = [w for w in words if w]
    for i, word in enumerate(words):
        if word not in ("make", "tessera") and not word.endswith("/bin/tessera"):
            continue
        rest = []
        for w in words[i + 1 :]:
            if w in SHELL_STOP or w.startswith("#"):
                break
            rest.append(w)
        if word == "make":
            yield from parse_make(rest, folder)
        elif (command := parse_tessera(rest)) is not None:
            yield command


def documented() -> dict[MakeCommand | TesseraCommand, set[str]]:
    """Each command the docs name, and where."""
    found: dict[MakeCommand | TesseraCommand, set[str]] = {}
    for doc in DOCS:
        text = doc.read_text()
        folder = str(doc.parent.relative_to(ROOT)) if doc.parent != ROOT else ""
        snippets = INLINE.findall(FENCE.sub("", text))
        snippets += [line for block in FENCE.findall(text) for line in block.splitlines()]
        for snippet in snippets:
            for command in commands_in(snippet, "" if folder in ("", "docs") else folder):
                found.setdefault(command, set()).add(str(doc.relative_to(ROOT)))
    return found


def markers() -> dict[str, set[str]]:
    """Each string of a `covers(…)` marker in the test sources, and the tests that carry it."""
    found: dict[str, set[str]] = {}
    for source in TEST_SOURCES:
        text = source.read_text()
        if "covers" not in text:  # parsing every test source costs seconds at collection
            continue
        for node in ast.walk(ast.parse(text, str(source))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = getattr(func, "attr", None) or getattr(func, "id", None)  # pytest.mark.covers or covers
            if name != "covers":
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.setdefault(arg.value, set()).add(str(source.relative_to(ROOT)))
    return found


def covered() -> set[MakeCommand | TesseraCommand]:
    out: set[MakeCommand | TesseraCommand] = set()
    for text in markers():
        out.update(commands_in(text))
    return out


@cache
def dry_run(directory: str, target: str) -> tuple[str, ...]:
    """The commands `make -n -B` would run for `target` (every prerequisite too, recursive makes followed)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", *(["-C", directory] if directory else []), target],
        cwd=ROOT,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip())


def made_by_make_test(command: MakeCommand) -> bool:
    """Whether `make test` runs what this target runs (its dry run is contained in `make test`'s)."""
    if (command.directory, command.target) == ("", "test"):
        return True
    whole = dry_run("", "test")
    return all(any(line in other for other in whole) for line in dry_run(command.directory, command.target))


def is_covered(command: MakeCommand | TesseraCommand, smoke: set[MakeCommand | TesseraCommand]) -> bool:
    if isinstance(command, MakeCommand):
        if any(
            isinstance(c, MakeCommand)
            and (c.directory, c.target) == (command.directory, command.target)
            and command.variables <= c.variables
            for c in smoke
        ):
            return True
        return made_by_make_test(command)
    return any(
        isinstance(c, TesseraCommand) and c.path == command.path and command.flags <= c.flags for c in smoke
    )


def test_the_docs_name_commands_this_test_can_read() -> None:
    """A guard for the reader below: it finds what the README names."""
    found = {str(c) for c in documented()}
    assert {"make demo", "make bench-interceptor", "make -C interceptor bench", "tessera convert"} <= found
    assert "tessera plugin probe --ready" in found and "make demo NVML=…" in found


def test_every_documented_command_has_a_smoke_test() -> None:
    ran = covered()
    missing = [f"{c} (in {', '.join(sorted(w))})" for c, w in documented().items() if not is_covered(c, ran)]
    assert missing == [], (
        "documented commands that `make test` never runs: add a smoke test marked "
        "covers(...) (tests/support/smoke.py), or let `make test` make it\n  " + "\n  ".join(sorted(missing))
    )


@pytest.mark.parametrize("text", sorted(markers()))
def test_every_marker_names_a_real_command(text: str) -> None:
    commands = list(commands_in(text))
    assert len(commands) == 1, f"covers({text!r}) names no `make TARGET` or `tessera SUBCOMMAND`"
    (command,) = commands
    if isinstance(command, TesseraCommand):
        parser = _parser()
        for name in command.path:
            parser = _subparsers(parser)[name]
        unknown = command.flags - set(parser._option_string_actions)
        assert unknown == set(), f"covers({text!r}): {' '.join(command.path)} has no {sorted(unknown)}"


def test_the_reader_understands_the_forms_the_docs_use() -> None:
    assert list(commands_in("make bench-scale NODES=100 FAMILIES=vgpu,mig-1g")) == [
        MakeCommand("", "bench-scale", frozenset())
    ]
    assert list(commands_in("make demo NVML=fake   # the NVML path")) == [
        MakeCommand("", "demo", frozenset({"NVML"}))
    ]
    assert list(commands_in("make cluster realnode")) == [
        MakeCommand("", "cluster", frozenset()),
        MakeCommand("", "realnode", frozenset()),
    ]
    in_folder = [MakeCommand("interceptor", "bench", frozenset())]
    assert list(commands_in("make bench", "interceptor")) == in_folder
    assert list(commands_in("make it so")) == []
    assert list(commands_in("helm install tessera deploy/helm/tessera -n tessera-system")) == []
    assert list(commands_in(".venv/bin/tessera sim inject ... --gpu 2 --clear")) == [
        TesseraCommand(("sim", "inject"), frozenset({"--gpu", "--clear"}))
    ]
    assert list(commands_in("tessera plugin --driver-root=<driverRoot> --driver-root-mount=/x | cat")) == [
        TesseraCommand(("plugin",), frozenset({"--driver-root", "--driver-root-mount"}))
    ]
