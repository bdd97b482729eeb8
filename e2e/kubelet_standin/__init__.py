"""A kubelet stand-in for one simulated node: plugin registration, the DRA gRPC calls, CDI resolution as a
container runtime does it, and pod status, against a real API server. Start one per node:
`python -m e2e.kubelet_standin --node-name N --root DIR --kubeconfig FILE`."""
