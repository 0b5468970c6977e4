"""``python -m window_operator`` runs the command line."""

import sys

from window_operator.cli import main

sys.exit(main())
