"""The files the node daemon shares with the interception library: a GPU's view, a claim's accounting region,
and the bounds its numbers are clipped to."""
