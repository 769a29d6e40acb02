"""A multi-host testbed on one machine: K compute hosts reached over SSH, each with its own libvirtd.

``Testbed`` (bed.py) brings it up and down; ``fixtures`` gives it to pytest; ``python -m tests.e2e.testbed
up|down|status`` (and ``tests/testbed.sh``) to people.
"""

import pytest

# The fixtures module's helpers assert; have pytest explain their failures as it does in test files.
pytest.register_assert_rewrite("tests.e2e.testbed.fixtures")

from tests.e2e.testbed.bed import Testbed, TestbedError, TestbedHost  # noqa: E402 (after the rewrite hook)

__all__ = ["Testbed", "TestbedError", "TestbedHost"]
