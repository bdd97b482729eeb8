"""The node daemon: kubelet registration and DRA gRPC services, prepare/unprepare, checkpoint, publisher."""
