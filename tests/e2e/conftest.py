"""End-to-end tests share the real-process stack."""

from tests.support.stack import client, stack  # noqa: F401 - fixtures
