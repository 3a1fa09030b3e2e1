"""structlog configuration: human-readable lines on stderr, so stdout stays for results."""

from __future__ import annotations

import logging
import sys

import structlog


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the moment of writing.

    structlog's PrintLogger keeps the stream it was given. Handing it ``sys.stderr`` itself pins the object of the
    moment, and one that is later replaced and closed (pytest's capture of a finished test, a redirected stream)
    makes every later log call raise "I/O operation on closed file" -- in a long-running worker thread, that
    stopped the agents.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "INFO") -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level)),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
