"""Every folder of tests/ and e2e/ that holds Python is a package, so import-linter's graph has every test
module in it and the contract "Tests never import e2e" (pyproject.toml) sees them all: grimp does not go into
a folder without `__init__.py` below a package, so a test there could import e2e unseen."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def folders_without_init(top: Path) -> list[str]:
    missing = []
    for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        if "__pycache__" in folder.parts or not any(folder.rglob("*.py")):
            continue
        if not (folder / "__init__.py").is_file():
            missing.append(str(folder.relative_to(ROOT)))
    return missing


def test_every_folder_of_tests_and_e2e_holding_python_is_a_package() -> None:
    missing = folders_without_init(ROOT / "tests") + folders_without_init(ROOT / "e2e")
    assert not missing, f"add an empty __init__.py to: {', '.join(sorted(missing))}"
