"""An HTTP client in a process of its own, for the latency benchmarks: what an agent calling the API sees.

The API under test runs in the benchmark's process (the embedded vector store belongs to one process), so a client
in that process too would share its interpreter lock and pay a Python HTTP library's own work on the server's
cores: with httpx in the server's process, HTTP added 3.2-3.7 ms to a conv-26 question, against 2.2-2.6 ms seen
from another process (same run, same server). Here the child keeps one connection open (Python's ``http.client``)
and times each request from sending it to the parsed JSON answer; the parent hands it one request at a time, so
the benchmarks can still alternate it with in-process queries.

    with ClientProcess(server.url) as client:
        ms, status, body = client.post("/v1/query", {"question": "..."})
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit


class ClientProcess:
    """A child process that sends the parent's requests over one keep-alive connection to ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._child: subprocess.Popen[str] | None = None

    def __enter__(self) -> ClientProcess:
        # From the repository root, where `-m benchmarks...` finds this module whatever the caller's folder.
        self._child = subprocess.Popen([sys.executable, "-m", __name__, self.base_url], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1,
                                       cwd=Path(__file__).resolve().parent.parent)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._child is None:
            return
        child, self._child = self._child, None
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def post(self, path: str, body: dict[str, Any]) -> tuple[float, int, Any]:
        """(milliseconds from sending to the parsed answer, HTTP status, the answer's JSON) of one POST."""
        if self._child is None or self._child.stdin is None or self._child.stdout is None:
            raise RuntimeError("the client process is not running (use it as a context manager)")
        self._child.stdin.write(json.dumps({"path": path, "body": body}) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the client process ended (exit status {self._child.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the client process could not send POST {path}: {answer['error']}")
        return float(answer["ms"]), int(answer["status"]), answer["body"]


def serve(base_url: str, requests: IO[str], answers: IO[str]) -> None:
    """The child's loop: one JSON request per line in, one JSON answer per line out."""
    where = urlsplit(base_url)
    connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port or 80, timeout=120)
    headers = {"Content-Type": "application/json"}
    for line in requests:
        asked = json.loads(line)
        payload = json.dumps(asked["body"]).encode("utf-8")
        try:
            started = time.perf_counter()
            connection.request("POST", asked["path"], body=payload, headers=headers)
            response = connection.getresponse()
            body = json.loads(response.read())
            ms = (time.perf_counter() - started) * 1000
        except (OSError, http.client.HTTPException, ValueError) as error:
            connection.close()  # the next request opens a new connection
            answers.write(json.dumps({"error": repr(error)}) + "\n")
        else:
            answers.write(json.dumps({"ms": ms, "status": response.status, "body": body}) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.argv[1], sys.stdin, sys.stdout)
