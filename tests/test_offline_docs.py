"""A newcomer's first look at a running server, offline (issue #57 item 12): ``/docs`` loads Swagger UI from the
server itself (no CDN), so it shows the API with no network; ``GET /`` leads to the explorer at ``/ui/``; and a
mistyped command suggests the closest one in one line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from offline_api import LOCAL_URL, offline_app

from compassmem.cli.main import main
from compassmem.query_api.server import BackgroundServer


@pytest.fixture(scope="module")
def app() -> Any:
    return offline_app()


@pytest.fixture(scope="module")
def api(app: Any) -> Iterator[TestClient]:
    with TestClient(app, base_url=LOCAL_URL) as client:
        yield client


def test_the_docs_page_loads_its_assets_from_this_server(api: TestClient) -> None:
    page = api.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r"""<(?:script|link)[^>]*?(?:src|href)=["']([^"']+)["']""", page.text)
    assert {urlsplit(url).path.rsplit(".", 1)[-1] for url in assets} >= {"js", "css"}, assets
    for url in assets:
        assert not urlsplit(url).netloc and url.startswith("/"), f"{url} is not served by this server"
        answer = api.get(url)
        assert answer.status_code == 200 and len(answer.content) > 1000, url
    assert "cdn" not in page.text.lower()


def test_the_root_leads_to_the_explorer(api: TestClient) -> None:
    answer = api.get("/", follow_redirects=False)
    assert answer.status_code in (307, 308)
    assert answer.headers["location"] == "/ui/"
    assert api.get("/").url.path == "/ui/"


def test_a_browser_with_no_network_shows_the_swagger_ui(app: Any, browser: Any) -> None:
    with BackgroundServer(app) as server:
        own = urlsplit(server.url).netloc
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        refused: list[str] = []

        def only_this_server(route: Any) -> None:
            if urlsplit(route.request.url).netloc == own:
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        try:
            context.route("**/*", only_this_server)
            page = context.new_page()
            page.goto(f"{server.url}/docs")
            page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
            assert "compassmem query API" in page.inner_text(".swagger-ui .info .title")
            page.wait_for_selector(".opblock", timeout=30_000)
            assert page.locator(".opblock").count() >= 10
            assert page.locator(".opblock-summary-path", has_text="/v1/query").count() >= 1
        finally:
            context.close()
    assert not refused, f"the page asked another host: {refused}"


@pytest.mark.parametrize(("typed", "said"), [
    ("ingset", "compassmem: unknown command 'ingset'; did you mean 'ingest'?"),
    ("stauts", "compassmem: unknown command 'stauts'; did you mean 'status'?"),
])
def test_a_mistyped_command_suggests_the_closest_in_one_line(typed: str, said: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main([typed, "file.jsonl"])
    assert ended.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [said] and captured.out == ""


def test_a_command_like_none_lists_them_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--data-dir", "somewhere", "zzzz"])
    assert ended.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("compassmem: unknown command 'zzzz' (commands: ingest, ask, ")
