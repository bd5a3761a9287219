"""`python -m jobtrail ...` is the `jobtrail` command."""

import gc
import sys

from jobtrail.surface.cli import main

code = main()
# What the command imported goes with the process: frozen, it is freed at exit without the collector walking
# it once more (up to half a second after a command that read a tokenizer, or a server that ran jobs).
gc.freeze()
sys.exit(code)
