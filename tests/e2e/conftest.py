"""Fixtures shared by the end-to-end tests."""

from tests.e2e.prepared import prepared_fleet

__all__ = ["prepared_fleet"]
