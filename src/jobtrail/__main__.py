"""`python -m jobtrail ...` is the `jobtrail` command."""

import sys

from jobtrail.surface.cli import main

sys.exit(main())
