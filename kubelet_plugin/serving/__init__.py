"""The running node plugin: options, its set-up, the instance's life cycle, slice publishing, API-version
gating, metrics and usage, the gRPC servers, registration, the DRA service, readiness and its probe, the
driver root."""
