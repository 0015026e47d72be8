"""structlog configuration shared by the AstraBox processes."""

from __future__ import annotations

import logging
import sys

import structlog

from astrabox.secret_settings import redact


def configure(*, json_logs: bool | None = None, level: str = "info") -> None:
    """JSON lines when stdout is not a terminal (production), readable otherwise; secrets masked."""
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
            redact,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
