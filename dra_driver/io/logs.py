"""structlog, configured once per process; everything else calls `structlog.get_logger()`.

Log lines go to stderr, always: a command's stdout is its data (`tessera inventory -o json | jq`). The
`tessera` command configures logging before any subcommand runs (`main` in dra_driver/cli/__init__.py); a
program that embeds a part of Tessera calls `configure` itself. Unconfigured, structlog would print to stdout.

Every value is bounded before it is rendered (`dra_driver.vocabulary.excerpt.clip`): a log line never echoes a
megabyte of someone's input, whichever message forgot to bound it first.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO, cast

import structlog

from dra_driver.vocabulary.excerpt import MESSAGE_CHARS, clip

TRACEBACK_CHARS = 16 * MESSAGE_CHARS
LogFormat = Literal["json", "console"]
_configured = False


class _Stderr:
    """The process's stderr as it is when a line is written, not when logging was configured: a redirect
    or a test's capture set up later still gets the line."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()  # one object: structlog keeps one write lock per file


def bound_values(logger: object, method: str, event: structlog.types.EventDict) -> structlog.types.EventDict:
    """structlog processor: cut every long value (tracebacks get more room)."""
    for key, value in event.items():
        if isinstance(value, int | float | bool | type(None)):
            continue
        limit = TRACEBACK_CHARS if key == "exception" else MESSAGE_CHARS
        text = value if isinstance(value, str) else str(value)
        if len(text) > limit:
            event[key] = clip(text, limit)  # a long list or mapping is shown as its cut text
    return event


def configure(*, level: str = "info", fmt: LogFormat = "console") -> None:
    global _configured  # noqa: PLW0603 - configuration is process-wide by nature
    if _configured:
        return
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            bound_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _STDERR)),
        cache_logger_on_first_use=True,
    )
    _configured = True
