"""What the node daemon records of prepared claims: the checkpoint, its store, the marker beside a claim's
files, the prepare steps and results."""
