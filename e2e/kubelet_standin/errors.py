"""Errors of the kubelet stand-in, rooted in Tessera's one hierarchy."""

from __future__ import annotations

from dra_driver.vocabulary.errors import TesseraError


class StandInError(TesseraError):
    """The stand-in could not do what the kubelet would have done (API call, plugin call, bad record)."""


class CdiError(StandInError):
    """A CDI spec is invalid or a CDI device id cannot be resolved: the container would not be created."""


class PluginUnavailableError(StandInError):
    """No plugin is registered for a driver a pod's claim was allocated from."""
