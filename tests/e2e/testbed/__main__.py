"""``python -m tests.e2e.testbed up|down|status`` (what tests/testbed.sh runs)."""

import sys

from tests.e2e.testbed.bed import main

sys.exit(main())
