"""Tessera's admission webhook: HAMi and Volcano pod YAML, unchanged, on Tessera. admission/README.md."""
