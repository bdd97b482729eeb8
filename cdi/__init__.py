"""Container Device Interface: the spec model, per-claim spec rendering and the atomic writer."""
