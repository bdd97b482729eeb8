"""The pure core: families, inventory → slices, counters, device order, allocation + config → what a claim
gets, settings, health rules. No I/O; the import-linter contract in pyproject.toml keeps it so."""
