"""What compassmem's log lines do inside a program that uses it as a library: nothing, unless that program asks.

compassmem logs with structlog. Unconfigured, structlog prints every line, debug included, to stdout, into the
program's own output. So importing compassmem configures structlog, unless the program already has, to hand each
line to the standard library's logger named after its module (``compassmem.library.memory``) as ``event key=value``
text. No handler is added: as for any library, warnings reach stderr through Python's last-resort handler, and the
rest shows only where the program configures logging (``logging.basicConfig(level=logging.INFO)``, or a level on
the ``compassmem`` logger). The command line (``core/logging_setup.py``) replaces this with its own lines on
stderr.
"""

from __future__ import annotations

import structlog


def route_through_standard_logging() -> None:
    """Send structlog's lines to the standard library's loggers, unless the program configured structlog itself."""
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # first: a line no logger wants costs nothing more
            structlog.contextvars.merge_contextvars,
            structlog.processors.format_exc_info,
            structlog.processors.LogfmtRenderer(key_order=["event"], bool_as_flag=False),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a program (or the command line) that configures structlog later takes over every logger.
        cache_logger_on_first_use=False,
    )
