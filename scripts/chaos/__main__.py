"""``python -m scripts.chaos``: the same as ``python scripts/chaos.py``."""

import sys

from .cli import main

sys.exit(main())
