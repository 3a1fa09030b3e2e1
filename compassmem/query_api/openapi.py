"""The API's OpenAPI document without a running server: ``compassmem openapi`` writes it, for typed clients
(``clients/typescript/`` generates its types from it) and for contract tests.

The document depends on no service and no setting, so an app over placeholders gives the same one as a served app;
``Settings.model_construct()`` reads no environment, so the document does not change with the caller's variables.
"""

from __future__ import annotations

import json
from typing import Any

from compassmem.core.config import Settings
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices


def openapi_document() -> dict[str, Any]:
    placeholders = ApiServices(memory=None,  # type: ignore[arg-type]
                               settings=Settings.model_construct(), metrics=MemoryMetrics(process_collectors=False))
    return create_app(placeholders).openapi()


def openapi_json() -> str:
    """The document as text: indented, with a final newline, so a regenerated copy diffs cleanly."""
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"
