"""`make demo` / `make demo-down`: a control plane, two simulated GPU nodes and the example workloads, left
running for kubectl (`python -m e2e.demo up|down`)."""
