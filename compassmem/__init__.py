"""compassmem: an event-graph long-term memory for LLM agents, fed by a stream.

The public surface: ``Memory`` (in-process), ``Client`` and ``AsyncClient`` (over HTTP) and the errors they raise.
They load on first use, so importing any compassmem module does not pull in the stores, torch or httpx. Their log
lines go to the standard library's loggers (``core/library_logging.py``): a program prints none of them unless it
configures logging.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from compassmem.core.library_logging import route_through_standard_logging

__version__ = "0.1.0"

if TYPE_CHECKING:
    from compassmem.library.client import AsyncClient, Client
    from compassmem.core.errors import (
        BadRequest,
        CompassmemError,
        Forbidden,
        NotFound,
        ServerError,
        Unauthorized,
        Unavailable,
    )
    from compassmem.library.memory import Memory

__all__ = ["AsyncClient", "BadRequest", "Client", "CompassmemError", "Forbidden", "Memory", "NotFound",
           "ServerError", "Unauthorized", "Unavailable", "__version__"]
_MODULES = {"Memory": "compassmem.library.memory", "Client": "compassmem.library.client",
            "AsyncClient": "compassmem.library.client"}

route_through_standard_logging()


def __getattr__(name: str) -> Any:  # noqa: ANN401 - whichever public class was asked for
    if name not in __all__:
        raise AttributeError(f"module 'compassmem' has no attribute {name!r}")
    return getattr(import_module(_MODULES.get(name, "compassmem.core.errors")), name)
