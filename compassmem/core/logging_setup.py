"""structlog configuration: lines on stderr, so stdout stays for results.

Two formats (``COMPASSMEM_LOG_FORMAT``): ``console``, human-readable ``key=value`` lines, and ``json``, one JSON
object per line for a log collector. Values bound with ``structlog.contextvars`` (the HTTP request id,
``query_api/request_id.py``) go into every line written in that context, in both formats, and so do the trace and
span ids of the current span when traces are on (``core/tracing.py``). In JSON, the lines of
libraries that log through the standard library (uvicorn, Faust, kafka-python) are JSON objects too: a collector
that parses JSON would otherwise drop or mangle them.
"""

from __future__ import annotations

import logging
import logging.config
import sys
from typing import Any, Literal

import structlog
from structlog.typing import Processor

from compassmem.core.terminal import terminal_safe
from compassmem.core.tracing import add_trace_ids

LogFormat = Literal["console", "json"]

# The log context's key of the HTTP request id.
REQUEST_ID_KEY = "request_id"
# What configure_logging chose, for the libraries that install their own logging configuration later.
_current: dict[str, str] = {"format": "console", "level": "INFO"}


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


class _WithoutQueryString(logging.Filter):
    """uvicorn's access lines with the path alone: a query string may be text a tenant searched for (a listing's
    ``q``), and log lines hold no user text (docs/traces.md)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn's access line: '%s - "%s %s HTTP/%s" %d' % (client, method, path with query, version, status).
        if isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            record.args = (client, method, str(path).split("?", 1)[0], version, status)
        return True


_WITHOUT_QUERY_STRING = _WithoutQueryString()


def current_request_id() -> str | None:
    """The id of the HTTP request being served (``query_api/request_id.py`` binds it), for whoever records it
    beside the log lines: the traces' spans."""
    value = structlog.contextvars.get_contextvars().get(REQUEST_ID_KEY)
    return value if isinstance(value, str) else None


def _common_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
    ]


def _terminal_safe_values(logger: object, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Console lines are read at a terminal: text they carry (an error quoting a file's line) shows its control
    characters as escapes. JSON lines escape them already."""
    return {key: terminal_safe(value) if isinstance(value, str) else value for key, value in event.items()}


def configure_logging(level: str = "INFO", log_format: LogFormat = "console") -> None:
    renderer: list[Processor] = (
        # Tracebacks as text in one field: a JSON line must stay one line.
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()] if log_format == "json"
        else [_terminal_safe_values, structlog.dev.ConsoleRenderer(colors=False)]
    )
    structlog.configure(
        processors=[*_common_processors(), *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level)),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    # Libraries' INFO lines are many and unstructured (Faust, kafka-python): only DEBUG shows them. uvicorn sets its
    # own loggers' levels, so its start-up and access lines still come.
    _current.update(format=log_format, level="WARNING" if level == "INFO" else level)
    # kafka-python logs a client's own connection trouble as ERROR with a traceback, including a socket closed under
    # a metadata refresh while a client closes (Ctrl-C on `compassmem dev` printed one): what such trouble means
    # for compassmem is said by its own lines (a poll that failed, a broker not reached in time). DEBUG shows them.
    logging.getLogger("kafka").setLevel(logging.DEBUG if level == "DEBUG" else logging.CRITICAL)
    # On the logger rather than a handler: it outlives the logging configurations uvicorn installs at each start.
    logging.getLogger("uvicorn.access").addFilter(_WITHOUT_QUERY_STRING)
    json_config = library_logging_config(None)
    if json_config is not None:
        logging.config.dictConfig(json_config)


def library_logging_config(console: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``logging.config.dictConfig`` to give a library that installs its own (uvicorn's ``log_config``,
    Faust's ``logging_config``): its own ``console`` one in the console format; in JSON, every record through one
    root handler that renders it as a JSON line with the context's bound values (the request id)."""
    if _current["format"] != "json":
        return console
    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.JSONRenderer()],
        foreign_pre_chain=[*_common_processors(), structlog.stdlib.add_logger_name,
                           structlog.processors.format_exc_info],
    )
    handler = logging.StreamHandler(_CurrentStderr())  # type: ignore[arg-type]
    handler.setFormatter(formatter)
    # uvicorn's loggers (and Faust's) keep no handlers of their own: their records reach the root handler once.
    own_handlers = {"handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"json": {"()": lambda: handler}},
        "root": {"level": _current["level"], "handlers": ["json"]},
        "loggers": {name: dict(own_handlers) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }
