"""One client for any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, hosted APIs).

LLMs are optional everywhere: every caller keeps its offline path. So the client has
one failure type, ``LlmError``, raised on a timeout, a refused connection, an HTTP error or a reply that is
not a chat completion; the callers here (``LlmAnswerer``, ``LlmDecomposer``) catch it, log why, and return
None so that the offline result stands.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Literal

import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from compassmem.core.config import Settings
from compassmem.core.contracts.query import EvidenceItem, TurnOut

log = structlog.get_logger(__name__)

CHAT_PATH = "/v1/chat/completions"
# Statuses worth one more try: the server is overloaded or restarting, not rejecting the request.
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_RETRY_PAUSE_S = 0.2
_ERROR_BODY_CHARS = 300


class LlmError(RuntimeError):
    """The endpoint gave no usable answer; the message says why. Callers fall back to their offline path."""


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class _ReplyMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: str | None = None


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    message: _ReplyMessage


class _Completion(BaseModel):
    """The part of a chat-completion response we read; servers add fields of their own."""

    model_config = ConfigDict(extra="ignore")

    choices: list[_Choice] = Field(min_length=1)


def chat_completions_url(url: str) -> str:
    """Accept a server root, a ``/v1`` base (what OpenAI clients call base_url) or the full endpoint."""
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}{CHAT_PATH}"


class ChatClient:
    """Synchronous and thread-safe (one pooled httpx client), so API worker threads can share it.

    ``timeout_s`` bounds each attempt's wall-clock time, not only the gaps between bytes (httpx's read
    timeout alone would let a server that trickles its reply hold a query for ever). One retry at most, and
    only after a quick failure (refused connection, 429 or 5xx): a timeout has already spent the budget.
    """

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout_s: float = 10.0,
                 retries: int = 1) -> None:
        if retries not in (0, 1):
            raise ValueError("retries must be 0 or 1")
        self.url = chat_completions_url(url)
        self.model = model
        self.timeout_s = timeout_s
        self.retries = retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=headers)

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatClient | None:
        """None when no endpoint is configured: the caller runs offline."""
        if not settings.llm_url:
            return None
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(settings.llm_url, settings.llm_model, api_key=key, timeout_s=settings.llm_timeout_s)

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """The assistant's reply text; raises LlmError when there is none to be had."""
        body = {
            "model": self.model,
            "messages": [m.model_dump() for m in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": False,
        }
        retries_left = self.retries
        while True:
            try:
                return self._attempt(body)
            except _Transient as error:
                if retries_left == 0:
                    raise LlmError(str(error)) from error
                retries_left -= 1
                log.info("llm.retry", url=self.url, reason=str(error))
                time.sleep(_RETRY_PAUSE_S)

    def _attempt(self, body: dict[str, object]) -> str:
        deadline = time.monotonic() + self.timeout_s
        try:
            with self._http.stream("POST", self.url, json=body) as response:
                raw = bytearray()
                for chunk in response.iter_bytes():
                    raw.extend(chunk)
                    if time.monotonic() > deadline:
                        raise LlmError(f"no complete reply within {self.timeout_s:g} s")
        except httpx.TimeoutException as error:
            raise LlmError(f"timed out after {self.timeout_s:g} s ({type(error).__name__})") from error
        except httpx.TransportError as error:
            raise _Transient(f"cannot reach {self.url}: {error!r}") from error
        if response.status_code in _RETRY_STATUSES:
            raise _Transient(f"HTTP {response.status_code}: {_snippet(raw)}")
        if response.status_code >= 400:
            raise LlmError(f"HTTP {response.status_code}: {_snippet(raw)}")
        try:
            completion = _Completion.model_validate_json(bytes(raw))
        except ValidationError as error:
            raise LlmError(f"not a chat completion: {_snippet(raw)}") from error
        content = completion.choices[0].message.content
        if not content or not content.strip():
            raise LlmError("the reply is empty")
        return content.strip()

    def close(self) -> None:
        self._http.close()


class _Transient(Exception):
    """A quick failure that one retry may cure; surfaces as LlmError once the retry is spent."""


def _snippet(raw: bytes | bytearray) -> str:
    text = bytes(raw[:_ERROR_BODY_CHARS]).decode("utf-8", errors="replace")
    return text + ("..." if len(raw) > _ERROR_BODY_CHARS else "")


# -- answer generation ---------------------------------------------------------------------------------------

ANSWER_SYSTEM_PROMPT = (
    "You answer a question about a conversation using only the evidence turns given. Each turn starts with "
    "the date and time it was said; resolve relative dates ('yesterday', 'last week') against that timestamp "
    "and answer with absolute dates. If the evidence does not contain the answer, say that you do not know. "
    "Answer in one or two short sentences."
)


def _evidence_turns(evidence: Sequence[EvidenceItem]) -> list[TurnOut]:
    """Distinct turns of the evidence, oldest first: a model follows a story better in the order it happened."""
    seen: dict[str, TurnOut] = {}
    for item in evidence:
        for turn in item.turns:
            seen.setdefault(turn.turn_id, turn)
    return sorted(seen.values(), key=lambda t: t.timestamp)


def answer_prompt(question: str, evidence: Sequence[EvidenceItem], max_chars: int) -> list[ChatMessage]:
    # The weekday helps a model resolve "last Saturday" against the day it was said.
    lines = [f"[{t.timestamp.strftime('%A %Y-%m-%d %H:%M %Z')}] ({t.turn_id}) {t.speaker}: {t.text}"
             for t in _evidence_turns(evidence)]
    # Keep the context inside small models' windows: drop the latest turns beyond the limit, never cut one.
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) > max_chars and kept:
            break
        kept.append(line)
        used += len(line) + 1
    user = "Evidence turns:\n" + "\n".join(kept) + f"\n\nQuestion: {question}"
    return [ChatMessage(role="system", content=ANSWER_SYSTEM_PROMPT), ChatMessage(role="user", content=user)]


class LlmAnswerer:
    """The query engine's ``answerer``: a short answer from the evidence turns, or None (offline, or failed)."""

    def __init__(self, client: ChatClient | None, max_tokens: int = 200, max_context_chars: int = 12_000) -> None:
        self.client = client
        self.max_tokens = max_tokens
        self.max_context_chars = max_context_chars
        if client is None:
            log.info("llm.answerer_offline", reason="no LLM endpoint configured (COMPASSMEM_LLM_URL)")

    def __call__(self, question: str, evidence: list[EvidenceItem]) -> str | None:
        if self.client is None:
            return None
        if not evidence:
            log.info("llm.answer_skipped", reason="no evidence to answer from")
            return None
        try:
            return self.client.chat(answer_prompt(question, evidence, self.max_context_chars),
                                    max_tokens=self.max_tokens)
        except LlmError as error:
            log.warning("llm.answer_failed", url=self.client.url, reason=str(error))
            return None


# -- question decomposition ----------------------------------------------------------------------------------

DECOMPOSE_SYSTEM_PROMPT = (
    "Split the user's question about a conversation into the simpler sub-questions whose answers together "
    "answer it; a question that needs no split is its own single sub-question. Each sub-question must stand "
    "alone (repeat names instead of pronouns). Reply with a JSON array of strings and nothing else, at most "
    "{limit} items."
)
_ARRAY = re.compile(r"\[.*\]", re.DOTALL)
_SUBGOALS = TypeAdapter(list[str])


def parse_subgoals(reply: str, limit: int) -> list[str] | None:
    """The JSON array of strings in a reply (code fences and chatter around it are tolerated), or None."""
    match = _ARRAY.search(reply)
    if match is None:
        return None
    try:
        items = _SUBGOALS.validate_python(json.loads(match.group(0)))
    except (json.JSONDecodeError, ValidationError):
        return None
    subgoals = list(dict.fromkeys(s.strip() for s in items if s.strip()))
    return subgoals[:limit] or None


class LlmDecomposer:
    """Subgoals from an LLM; None whenever it cannot give a usable list, so the rule-based split stands."""

    def __init__(self, client: ChatClient | None, max_subgoals: int = 4) -> None:
        self.client = client
        self.max_subgoals = max_subgoals

    def decompose(self, question: str) -> list[str] | None:
        if self.client is None:
            return None
        messages = [ChatMessage(role="system", content=DECOMPOSE_SYSTEM_PROMPT.format(limit=self.max_subgoals)),
                    ChatMessage(role="user", content=question)]
        try:
            reply = self.client.chat(messages, max_tokens=200)
        except LlmError as error:
            log.warning("llm.decompose_failed", url=self.client.url, reason=str(error))
            return None
        subgoals = parse_subgoals(reply, self.max_subgoals)
        if subgoals is None:
            log.warning("llm.decompose_unparsable", reply=_snippet(reply.encode()))
        return subgoals
