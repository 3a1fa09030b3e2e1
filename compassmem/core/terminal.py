"""What compassmem prints for a person at a terminal: every command's output, its error lines and the console log.

Text from memory or from a file (a turn's words, a speaker, an id in an error) may hold characters a terminal acts
on: ESC starts colour and cursor sequences (a turn could clear the screen or rewrite earlier lines), carriage
return overwrites the line, the bidirectional overrides reorder what is shown. ``terminal_safe`` shows each of them
as a visible escape (``\\x1b``, ``\\u202e``); tabs and newlines stay, since they are the layout of what is shown.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

# C0 controls but tab and newline, DEL, C1 controls, the bidirectional embeddings, overrides and isolates, and lone
# surrogates (which no terminal encoding can even write).
_NOT_FOR_TERMINALS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on written as its escape (``\\x1b``)."""
    return _NOT_FOR_TERMINALS.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def echo(message: object = "", *, file: TextIO | None = None, end: str = "\n", flush: bool = False) -> None:
    """``print`` for everything a command shows: the message made ``terminal_safe`` (``end`` is layout, kept)."""
    print(terminal_safe(str(message)), file=file if file is not None else sys.stdout, end=end, flush=flush)
