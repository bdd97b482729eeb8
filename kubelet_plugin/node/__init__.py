"""Where the node daemon's things are on the host: paths, file modes, sockets, the processes it starts, Node
events."""
