"""The explorer's page at ``/ui``: static files (``compassmem/query_api/ui/``) with a policy that keeps it to its own
files and this API. The page holds no data and needs no key: it asks for one and sends it with each request to the
endpoints of ``compassmem/query_api/routers/``, which hold it to the same API keys as any client.
"""

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

UI_DIR = Path(__file__).resolve().parent.parent / "ui"


class _UiFiles(StaticFiles):
    """The page's files, with a policy that lets it load only its own files and talk only to this API."""

    _HEADERS = {
        "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                   "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                                   "base-uri 'none'; form-action 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        # Revalidated on every load (ETag), so a new release of the page is picked up at once.
        "Cache-Control": "no-cache",
    }

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(self._HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """The page at /ui/ (index.html), its modules and the vendored graph library under it."""
    app.mount("/ui", _UiFiles(directory=UI_DIR, html=True), name="ui")
