"""The memory end-to-end tests, unchanged, with the agent on the docker driver (the real CLI in a
container, whose home the agent writes the stores into). Skipped only when no Docker daemon answers."""

from __future__ import annotations

import pytest

from tests.e2e.test_memory_end_to_end import (  # noqa: F401 - run here with docker
    test_links_and_special_files_in_memory_are_never_followed_or_written_back,
    test_memory_written_by_one_session_is_read_by_the_next,
)
from tests.support.stack import Stack, StartDockerStack

pytestmark = pytest.mark.e2e


@pytest.fixture
def stack(docker_stacks: StartDockerStack) -> Stack:
    return docker_stacks()
