"""A small local server speaking the OpenAI chat-completions protocol, for the LLM tests (test_llm.py,
test_llm_events.py): a FastAPI app under uvicorn on a loopback port. Each test sets how it behaves (``mode``:
answer, slow, HTTP 500, flaky, malformed JSON) and what it answers (``reply``, or ``respond`` to answer from the
messages sent), and reads what it was sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from compassmem.query_api.server import BackgroundServer

ANSWER = "The launch slipped because the client changed the requirements."
SLOW_S = 1.5


class FakeChatServer:
    """What the endpoint does next (``mode``) and what it was sent (``requests``)."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.reply = ANSWER
        self.respond: Callable[[list[dict[str, Any]]], str] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.complete)

    def reset(self, reply: str = ANSWER) -> None:
        self.mode, self.reply, self.respond = "answer", reply, None
        self.requests.clear()
        self.headers.clear()

    async def complete(self, request: Request) -> Response:
        sent = await request.json()
        self.requests.append(sent)
        self.headers.append(dict(request.headers))
        mode = self.mode
        if mode == "flaky":  # one failure, then fine: the retry should cure it
            self.mode = "answer"
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if mode == "slow":
            await asyncio.sleep(SLOW_S)
        if mode == "error":
            return JSONResponse({"error": {"message": "model crashed"}}, status_code=500)
        if mode == "garbage":
            return PlainTextResponse('{"choices": [{"message": ', media_type="application/json")
        if mode == "wrong-shape":
            return JSONResponse({"choices": []})
        reply = self.reply if self.respond is None else self.respond(sent["messages"])
        return JSONResponse({
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })


@contextmanager
def serving_fake_chat() -> Iterator[tuple[FakeChatServer, str]]:
    """The fake endpoint and its URL, served until the block ends."""
    fake = FakeChatServer()
    with BackgroundServer(fake.app) as server:
        yield fake, server.url
