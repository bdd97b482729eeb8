"""The running node plugin: options, wiring, the gRPC servers, registration, the DRA service, readiness and
its probe, the driver root."""
