"""A real Kubernetes node for e2e: the upstream kubelet, containerd 2.x, runc and CNI plugins built offline
(build.sh), images made without a registry (image.py), and Tessera's plugin serving that kubelet (node.py)."""
