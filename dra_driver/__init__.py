"""Tessera's device model: discovery, MIG tables, inventory → ResourceSlices, opaque configs, CLI."""
