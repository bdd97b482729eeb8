"""What an administrator runs against a live cluster beside `tessera explain`: `tessera gpu` (cordon, drain
and uncordon one GPU)."""
