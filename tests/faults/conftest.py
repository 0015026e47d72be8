"""Fault tests share the real-process stack, and a Docker installation of their own."""

from tests.support.containers import containers  # noqa: F401 - fixture
from tests.support.stack import client, docker_stacks, stack, stacks  # noqa: F401 - fixtures
