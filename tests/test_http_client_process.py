"""The latency benchmarks' HTTP client in a process of its own, against a real HTTP server, and their alternation."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from conftest import serving_handler

from benchmarks.common import alternating, stopwatch
from benchmarks.http_client_process import ClientProcess


class _Echo(BaseHTTPRequestHandler):
    """Answers a POST with its path, its JSON body and the client's port; ``/text`` with something not JSON."""

    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/text":
            answer, status = b"not json", 500
        else:
            answer, status = json.dumps({"path": self.path, "body": json.loads(body),
                                         "client_port": self.client_address[1]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo_url() -> Iterator[str]:
    with serving_handler(_Echo) as url:
        yield url


def test_posts_from_another_process_over_one_connection(echo_url: str) -> None:
    with ClientProcess(echo_url) as client:
        answers = [client.post("/v1/query", {"question": f"q{i}", "tenant": "t"}) for i in range(3)]
        child = client._child
        assert child is not None and child.pid != os.getpid()
    for i, (ms, status, body) in enumerate(answers):
        assert status == 200 and ms > 0
        assert body["path"] == "/v1/query" and body["body"] == {"question": f"q{i}", "tenant": "t"}
    # Keep-alive: every request came over the same client port.
    assert len({body["client_port"] for _, _, body in answers}) == 1
    assert child.poll() is not None  # leaving the block ended the child


def test_an_answer_that_is_not_json_is_an_error_and_the_client_goes_on(echo_url: str) -> None:
    with ClientProcess(echo_url) as client:
        with pytest.raises(RuntimeError, match="could not send POST /text"):
            client.post("/text", {})
        _, status, body = client.post("/v1/query", {"question": "after"})
    assert status == 200 and body["body"] == {"question": "after"}


def test_a_client_outside_its_block_refuses() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        ClientProcess("http://127.0.0.1:9").post("/v1/query", {})


def test_alternating_takes_each_path_per_question_and_rotates_who_goes_first() -> None:
    calls: list[tuple[str, str]] = []

    def path(name: str, ms: float) -> Callable[[str], float]:
        def ask(question: str) -> float:
            calls.append((name, question))
            return ms
        return ask

    samples = alternating({"a": path("a", 1.0), "b": path("b", 2.0), "c": stopwatch(lambda q: calls.append(("c", q)))},
                          ["q0", "q1", "q2"])
    assert samples["a"] == [1.0] * 3 and samples["b"] == [2.0] * 3
    assert len(samples["c"]) == 3 and all(ms >= 0 for ms in samples["c"])
    assert calls == [("a", "q0"), ("b", "q0"), ("c", "q0"), ("b", "q1"), ("c", "q1"), ("a", "q1"),
                     ("c", "q2"), ("a", "q2"), ("b", "q2")]
