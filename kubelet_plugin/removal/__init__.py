"""`tessera cleanup`'s parts: what a node holds, what to remove, carrying it out, and the record of it."""
