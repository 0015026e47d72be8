"""End-to-end tests share the real-process stack."""

from tests.support.containers import containers, sandbox_runtime  # noqa: F401 - fixtures
from tests.support.stack import client, docker_stacks, stack, stacks  # noqa: F401 - fixtures
