"""HAMi's and Volcano's GPU requests → Tessera's claims: the pure conversion the webhook and
`tessera convert` share (no Kubernetes client, no sockets, no files). admission/README.md."""
