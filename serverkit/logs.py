"""structlog set-up for every AstraBox server process: one shape, secrets masked.

JSON lines in production (when the stream is not a terminal), readable lines on a terminal; each
line has its level, an ISO UTC timestamp, the context bound with `structlog.contextvars` and,
inside a span, its trace_id and span_id (`serverkit.tracing`); the last step masks secrets (`astrabox.secret_settings.redact`).

A process whose log goes to a file while a person watches its terminal (`astrabox up`, `astrabox
demo`) echoes its warnings and errors there too, as readable lines (`echo`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog

from astrabox.secret_settings import redact, redact_text
from serverkit.tracing import add_trace_ids

__all__ = ["LogFormat", "configure"]

# "auto": JSON unless the stream is a terminal.
LogFormat = Literal["auto", "json", "console"]
# What an echoed line leaves out: the log file has it, a person at a terminal needs none of it.
_NOT_ECHOED = ("timestamp", "trace_id", "span_id")


def configure(
    fmt: LogFormat | str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    *,
    echo: TextIO | None = None,
    echo_level: str = "warning",
) -> None:
    """Log at `level` and above to `stream` (standard error by default) in `fmt`; with `echo`, lines
    at `echo_level` and above are also written there, readable and without timestamps or trace ids."""
    out = stream if stream is not None else sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    rendering: list[structlog.typing.Processor] = (
        [structlog.dev.ConsoleRenderer()]
        if console
        else [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    )
    echoing: list[structlog.typing.Processor] = [_Echo(echo, echo_level)] if echo is not None else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *echoing,
            *rendering,
            redact,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_level(level)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )


def _level(name: str) -> int:
    return logging.getLevelNamesMapping()[name.upper()]


class _Echo:
    """A processor writing a readable copy of each line at `level` and above to `stream`, secrets
    masked; the line itself goes on to the log's own renderer unchanged."""

    def __init__(self, stream: TextIO, level: str) -> None:
        self._stream = stream
        self._level = _level(level)
        self._renderer = structlog.dev.ConsoleRenderer(pad_event_to=0, colors=_is_terminal(stream), pad_level=False)

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if _level(str(event.get("level", "info"))) >= self._level:
            shown = {key: value for key, value in event.items() if key not in _NOT_ECHOED}
            line = redact_text(str(self._renderer(logger, method, shown)))
            print(line, file=self._stream, flush=True)
        return event


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except ValueError:  # closed
        return False
