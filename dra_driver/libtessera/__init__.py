"""What the node shares with libtessera.so, the interception library (pure): the names it finds its claims by
(`names.py`), the limits file (`limits_file.py`), the accounting region's layout (`region_layout.py`) and the
GPU view's (`view_layout.py`). The C side of each is in interceptor/src; the node's reads and writes of the
files are at the edge (kubelet_plugin/library_files). docs/architecture.md, "The Python ↔ C contract"."""
