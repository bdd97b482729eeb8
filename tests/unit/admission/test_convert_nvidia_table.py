"""docs/migration-from-nvidia-dra.md holds the table the conversion makes (admission/convert/nvidia_table)."""

from __future__ import annotations

from pathlib import Path

from admission.convert.nvidia_table import render

DOC = Path(__file__).resolve().parents[3] / "docs" / "migration-from-nvidia-dra.md"


def test_the_migration_guide_shows_what_the_conversion_does() -> None:
    text = DOC.read_text()
    held = text.split("<!-- nvidia-table: begin -->\n", 1)[1].split("<!-- nvidia-table: end -->", 1)[0]
    assert held == render(), "run `python -m admission.convert.nvidia_table` and paste it into the guide"


def test_the_table_shows_a_row_per_case_and_the_refusals_reasons() -> None:
    table = render()
    assert "| `gpu.nvidia.com` | whole GPU (gpu.tessera.dev) |" in table
    assert "MPS share (memory 8Gi, cores 30; mps.tessera.dev)" in table
    assert "| `compute-domain-daemon.nvidia.com` | refused: ComputeDomains" in table
    assert "| `device.attributes['gpu.nvidia.com'].addressingMode` | refused: " in table
