"""Which failures of a command are for the user to fix, told as one line instead of a traceback.

A command that fails on a known error (stores that cannot be opened or stop answering, a file that cannot be read,
an embedding model that is not there, a broker or topic that cannot be used) already has a message saying what
happened and what to change; a traceback would bury it. Any other exception is a bug and keeps its traceback.

The classes are looked up in ``sys.modules`` rather than imported: an error can only have been raised by a module
that is loaded, and importing them all here would load the stores, the embedder and Kafka for ``compassmem --help``.
"""

from __future__ import annotations

import sys

# (module, class): errors whose message is written for the person at the command line.
KNOWN_ERRORS: tuple[tuple[str, str], ...] = (
    ("compassmem.sinks.factory", "StoreOpenError"),
    ("compassmem.sinks.falkordb_server", "FalkorDBStartupError"),
    ("compassmem.embedding.onnx_embedder", "OnnxModelError"),
    ("compassmem.embedding.embedders", "EmbeddingModelError"),
    ("compassmem.write.importers", "ImportFormatError"),
    ("compassmem.streams.broker", "BrokerStartupError"),
    ("compassmem.streams.topics", "TopicSetupError"),
    ("compassmem.publish.producer", "ProduceError"),
    ("compassmem.query_api.server", "ApiStartupError"),
    ("compassmem.mcp.server", "McpStartupError"),
    ("compassmem.cli.api_key", "ApiKeyError"),
    ("compassmem.publish.publisher", "PublishError"),
    # The library's own errors (``compassmem.Memory``, the HTTP clients), once that module is part of the package.
    ("compassmem.core.errors", "CompassmemError"),
)


def one_line(error: BaseException) -> str | None:
    """The message to print for a known error, or None for an error that should keep its traceback."""
    for module_name, class_name in KNOWN_ERRORS:
        known = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(known, type) and isinstance(error, known):
            return str(error)
    # A file the command was given (or writes) that cannot be used: the path and the reason say it all.
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}"
    failures = sys.modules.get("compassmem.sinks.failures")
    if failures is not None and failures.is_store_unavailable(error):
        return (f"a store stopped answering ({type(error).__name__}: {error}); check that Qdrant and FalkorDB "
                "are running (or that no other process holds the embedded stores) and run the command again")
    return None
