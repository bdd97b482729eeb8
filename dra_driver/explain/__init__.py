"""`tessera explain`: why a ResourceClaim does or does not fit a node, evaluated like kube-scheduler does."""
