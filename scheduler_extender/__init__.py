"""An optional kube-scheduler extender: scores nodes by the GPU fragmentation a placement would cause
(docs/scheduling.md, "The fragmentation-aware extender")."""
