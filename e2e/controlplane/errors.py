"""Errors of the e2e control plane, rooted in Tessera's one hierarchy."""

from __future__ import annotations

from dra_driver.vocabulary.errors import TesseraError


class ControlPlaneError(TesseraError):
    """A control-plane component could not be built, started, reached or stopped."""
