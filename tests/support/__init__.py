"""What tests, e2e and benchmarks share to drive the real daemon: the kubelet's side of the protocols, claims
kept in a directory, sample claims, fault injection, and a daemon entry point that installs them."""
