"""The node daemon's reads and writes of the files it shares with the interception library: a GPU's view, a
claim's accounting region (and the bounds its numbers are clipped to), a claim's limits file. Their formats
and layouts are dra_driver/libtessera's."""
