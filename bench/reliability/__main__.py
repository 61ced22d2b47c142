"""`python -m bench.reliability`: every scenario, or those named with --scenario (cli.py)."""

import sys

from bench.reliability.cli import main

sys.exit(main())
