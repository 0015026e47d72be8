"""What a failed command prints: one readable line saying what failed, never a traceback.

Commands run their work under `asyncio.run`, where task groups raise
`ExceptionGroup`s: the failure that matters is a leaf of the group, beside the
cancellations it caused in its sibling tasks. `causes` finds those leaves and
`describe` says the first in one line. Errors written for the user (the
client's own, a contributed command's, an operating-system error naming its
file) are their message; anything else is a bug and is named with its type,
with the environment variable that shows its traceback.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Sequence

__all__ = ["TRACEBACK_ENV", "causes", "describe", "print_traceback_if_asked"]

TRACEBACK_ENV = "ASTRABOX_TRACEBACK"
"""Set (to anything but empty) for a failed command to print its traceback before its one line."""


def causes(error: BaseException) -> list[BaseException]:
    """The exceptions inside `error`'s (nested) groups, or `error` itself when it is none; the
    cancellations a failure caused are left out unless there is nothing else."""
    if not isinstance(error, BaseExceptionGroup):
        return [error]
    leaves = [leaf for inner in error.exceptions for leaf in causes(inner)]
    meaningful = [leaf for leaf in leaves if not isinstance(leaf, asyncio.CancelledError)]
    return meaningful or leaves


def describe(failures: Sequence[BaseException], expected: tuple[type[BaseException], ...] = ()) -> str:
    """One line for the first of `failures`: its message when it is one of `expected` (or an
    OSError or a timeout), else its type and message, as the bug it is."""
    first = failures[0]
    message = str(first).strip()
    if isinstance(first, TimeoutError):
        line = message or "timed out"
    elif isinstance(first, (*expected, OSError)):
        line = message or type(first).__name__
    else:
        first_line = message.splitlines()[0] if message else ""
        line = f"{type(first).__name__}{f': {first_line}' if first_line else ''} (unexpected; {TRACEBACK_ENV}=1 shows where)"
    more = len(failures) - 1
    return line + (f" (and {more} more failure{'s' if more > 1 else ''})" if more else "")


def print_traceback_if_asked(error: BaseException) -> None:
    """The whole traceback on stderr, when TRACEBACK_ENV asks for it."""
    if os.environ.get(TRACEBACK_ENV):
        traceback.print_exception(error)
