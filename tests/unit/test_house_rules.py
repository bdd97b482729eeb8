"""House rules a reviewer should not have to count by hand (`make lint` runs this file).

No product function or method is longer than 80 lines, counted from its `def` to its last line (signature,
docstring and nested functions included): one that grows past it is split by meaning.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("dra_driver", "kubelet_plugin", "cdi", "admission", "scheduler_extender")
GENERATED = ("kubelet_plugin/proto/gen",)  # written by grpc_tools, not by us
MAX_FUNCTION_LINES = 80


def long_functions(source: str, *, where: str, limit: int = MAX_FUNCTION_LINES) -> Iterator[str]:
    """`<where>:<line> <name> (<n> lines)` for every function of `source` longer than `limit` lines."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                yield f"{where}:{node.lineno} {node.name} ({lines} lines)"


def product_files() -> Iterator[Path]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(GENERATED):
                yield path


def test_no_product_function_is_longer_than_80_lines() -> None:
    found = [
        line
        for path in product_files()
        for line in long_functions(path.read_text(encoding="utf-8"), where=str(path.relative_to(ROOT)))
    ]
    said = f"functions over {MAX_FUNCTION_LINES} lines; split them by meaning:\n"
    assert found == [], said + "\n".join(found)


def test_the_count_runs_from_def_to_the_last_line_nested_functions_included() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(78))
    at_limit = f"def ok():\n{body}    return 0\n"  # 80 lines
    assert list(long_functions(at_limit, where="m.py")) == []
    nested = body.replace("    ", "        ")
    over = f"class C:\n    async def run(self):\n        def inner():\n            pass\n{nested}"
    assert list(long_functions(over, where="m.py")) == ["m.py:2 run (81 lines)"]
    assert len(list(product_files())) > 100  # the walk reaches the product
