"""Reading JSONL a line at a time within limits: every file a command is given (``import``, ``ingest``, ``eval``'s
questions) goes through here, so each refuses the same lines with the same words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from compassmem.core.errors import CompassmemError

# An event of about 350 turns of the largest size a turn may have (thousands of ordinary ones): past this a line is
# refused unread.
MAX_LINE_CHARS = 16 * 1024 * 1024


class LineFormatError(CompassmemError, ValueError):
    """A line over ``MAX_LINE_CHARS``, or bytes that are not UTF-8; the message names the line."""


def text_lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    """Every line with its 1-based number, blank ones too; LineFormatError for a line over ``MAX_LINE_CHARS`` (it
    is not read whole) or bytes that are not UTF-8."""
    number = 0
    while True:
        try:
            text = stream.readline(MAX_LINE_CHARS + 2)
        except UnicodeDecodeError as error:
            # A text stream decodes a block at a time: the bad byte is on this line or a little after it.
            raise LineFormatError(f"line {number + 1} or soon after: not UTF-8 text ({error.reason})") from None
        if not text:
            return
        number += 1
        if len(text.rstrip("\r\n")) > MAX_LINE_CHARS:
            raise LineFormatError(f"line {number}: longer than {MAX_LINE_CHARS:,} characters, the most a line may "
                                  "hold")
        yield number, text


def json_value(text: str) -> Any:  # noqa: ANN401 - any JSON value
    """``json.loads``; JSON nested deeper than the parser's stack is a ``JSONDecodeError`` like any other bad JSON,
    not a ``RecursionError`` (which would end the command with a traceback)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to parse", text, 0) from None
