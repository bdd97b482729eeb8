"""Errors of the real e2e node, rooted in Tessera's one hierarchy."""

from __future__ import annotations

from dra_driver.vocabulary.errors import TesseraError


class RealNodeError(TesseraError):
    """A real node component could not be built, started, reached or stopped, or misbehaved."""
