"""Claims on the node: reading them, prepare and unprepare, their directories and processes, the node's state,
start-up reconciliation and recovery."""
