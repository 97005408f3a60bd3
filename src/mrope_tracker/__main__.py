"""`python -m mrope_tracker` runs the `mrope-tracker` command line."""

import sys

from .cli import main

sys.exit(main())
