"""Request ids and JSON logs: every response carries ``X-Request-ID`` and every log line of the request its id."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from fastapi.testclient import TestClient

from compassmem.query_api.request_id import REQUEST_ID_HEADER, request_id_of
from offline_api import LOCAL_URL, offline_app


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(offline_app(api_max_body_bytes=1024), base_url=LOCAL_URL)


def test_every_response_carries_a_request_id(client: TestClient) -> None:
    answers = [client.get("/healthz"), client.get("/v1/events/e1"), client.get("/no-such-route"),
               client.post("/v1/query", json={"conversation_id": "c"}),  # 422
               client.post("/v1/turns", content=b"x" * 2048, headers={"content-type": "application/json"})]  # 413
    assert [answer.status_code for answer in answers] == [200, 404, 404, 422, 413]
    ids = [answer.headers[REQUEST_ID_HEADER] for answer in answers]
    assert all(len(made) == 32 for made in ids) and len(set(ids)) == len(ids)


def test_a_valid_incoming_id_is_kept_and_an_invalid_one_replaced(client: TestClient) -> None:
    kept = client.get("/healthz", headers={REQUEST_ID_HEADER: "trace-42:a.b_c"})
    assert kept.headers[REQUEST_ID_HEADER] == "trace-42:a.b_c"
    for bad in ("has space", "x" * 129, "new\\nline", "quote\"", ""):
        replaced = client.get("/healthz", headers={REQUEST_ID_HEADER: bad}).headers[REQUEST_ID_HEADER]
        assert replaced != bad and len(replaced) == 32


def test_the_id_rule() -> None:
    assert request_id_of("a" * 128) == "a" * 128
    assert request_id_of("a" * 129) != "a" * 129
    assert request_id_of(None) != request_id_of(None)


# Run in a child process: logging is configured once per process, and the test suite's own is the console one.
_JSON_LOGS = textwrap.dedent("""
    import structlog
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from fastapi.testclient import TestClient

    from compassmem.core.logging_setup import configure_logging
    from compassmem.query_api.request_id import install_request_ids

    configure_logging("INFO", "json")
    log = structlog.get_logger("probe")
    app = FastAPI()

    @app.get("/work")
    def work() -> dict:
        log.info("probe.working", step=1)
        return {}

    @app.get("/fail")
    def fail() -> dict:
        raise RuntimeError("boom")

    @app.exception_handler(Exception)
    async def unexpected(request, exc):
        log.error("probe.unhandled", error=repr(exc))
        return JSONResponse(status_code=500, content={"detail": "internal error"})

    install_request_ids(app)
    client = TestClient(app, raise_server_exceptions=False)
    ok = client.get("/work", headers={"X-Request-ID": "req-ok"})
    failed = client.get("/fail", headers={"X-Request-ID": "req-fail"})
    print(ok.status_code, ok.headers["X-Request-ID"], failed.status_code, failed.headers["X-Request-ID"])
""")


def test_json_log_lines_parse_and_carry_the_request_id() -> None:
    done = subprocess.run([sys.executable, "-c", _JSON_LOGS], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "req-ok", "500", "req-fail"]
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    working = next(line for line in lines if line["event"] == "probe.working")
    assert working["request_id"] == "req-ok" and working["level"] == "info" and working["step"] == 1
    assert "timestamp" in working
    # The error handler runs outside the middleware, after the endpoint raised: its line still names the request.
    unhandled = next(line for line in lines if line["event"] == "probe.unhandled")
    assert unhandled["request_id"] == "req-fail"
