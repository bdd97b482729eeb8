"""The benchmarks on a real control plane (`make bench-e2e`, `bench-metrics`, `bench-webhook`, `bench-scale`,
`bench-order`; docs/performance.md): each a `python -m e2e.benches.<name>` entry point with a `--smoke`
form."""
