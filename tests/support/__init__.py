"""What tests, e2e and benchmarks share to drive the real daemon: the kubelet's side of the protocols, claims
kept in a directory, sample claims, fault injection, and a daemon entry point that installs them; and the
tests' shared helpers (inventories, claim models, family plans, slice checks), imported by full name."""
