"""`python -m dra_driver.cli …`: the device model's subcommands alone (tests run it without the daemon's)."""

import sys

from dra_driver.cli import main

sys.exit(main())
