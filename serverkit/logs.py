"""structlog set-up for every AstraBox server process: one shape, secrets masked.

JSON lines in production (when the stream is not a terminal), readable lines on a terminal; each
line has its level, an ISO UTC timestamp, the context bound with `structlog.contextvars` and,
inside a span, its trace_id and span_id (`serverkit.tracing`); the last step masks secrets (`astrabox.secret_settings.redact`).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

from astrabox.secret_settings import redact
from serverkit.tracing import add_trace_ids

__all__ = ["LogFormat", "configure"]

# "auto": JSON unless the stream is a terminal.
LogFormat = Literal["auto", "json", "console"]


def configure(fmt: LogFormat | str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    """Log at `level` and above to `stream` (standard error by default) in `fmt`."""
    out = stream if stream is not None else sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    rendering: list[structlog.typing.Processor] = (
        [structlog.dev.ConsoleRenderer()]
        if console
        else [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *rendering,
            redact,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
