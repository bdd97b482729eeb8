"""Benchmarks that print numbers against their targets (`make bench-*`)."""
