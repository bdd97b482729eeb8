#!/usr/bin/python3
"""/usr/local/bin/tessera in the node plugin image: the plugin's packages live in /opt/tessera/site,
apart from the Debian Python's own (deploy/image/image.json, paths.site)."""

import sys

sys.path.insert(0, "/opt/tessera/site")

from kubelet_plugin.command import main

sys.exit(main())
