"""The host's files and logs: atomic writes, safe trees, versioned documents, the driver root, structlog."""
