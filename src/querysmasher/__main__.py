"""`python -m querysmasher`: the command-line interface (querysmasher.cli)."""

import sys

from .cli import main

sys.exit(main())
