"""Publishing the node's ResourceSlices: the publisher and the plan of writes it carries out."""
