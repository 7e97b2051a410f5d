"""``python -m deltaflow_runtime COMMAND ...``: the data-plane commands without the operator CLI."""

import sys

from deltaflow_runtime.cli import main

sys.exit(main())
