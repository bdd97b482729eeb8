"""Device health: the kubelet's health service and the Node events when a GPU fails or recovers."""
