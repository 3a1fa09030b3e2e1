"""Reading BEAM chats (Tavakoli et al., github mohammadtavakoli78/BEAM), shared by the recipes that turn them into
benchmark data (``beam_requests`` for boundaries, ``beam_to_locomo`` for retrieval).

The repository carries no licence file: evaluation only, never copy it (nor what these recipes write) into the
repository. The team holds out BEAM's 100K chats for its own measurement: the recipes read the 500K ones only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from compassmem.core.models import MAX_TEXT_BYTES

HELD_OUT = "100K"
HELD_OUT_MESSAGE = "BEAM's 100K chats are held out for the team's own measurement: use the 500K ones"
# The generator's bookkeeping at the end of a user message ('->-> 3,1'), not something the user said.
_MARKER = re.compile(r"\s*->->\s*[\d,\s]+$")


def fit_text(text: str) -> tuple[str, bool]:
    """The text within the turn limit (16 KiB of UTF-8), cut at the last paragraph break (or line, or space) that
    fits, and whether it was cut."""
    encoded = text.encode("utf-8")
    if len(encoded) <= MAX_TEXT_BYTES:
        return text, False
    head = encoded[:MAX_TEXT_BYTES].decode("utf-8", errors="ignore")
    for separator in ("\n\n", "\n", " "):
        cut = head.rfind(separator)
        if cut > MAX_TEXT_BYTES // 2:
            return head[:cut].rstrip(), True
    return head, True


def message_text(message: dict[str, Any]) -> tuple[str, bool]:
    """What a message said, as a turn: without the user's marker, within the turn limit (and whether it was cut)."""
    text = message["content"]
    if message["role"] == "user":
        text = _MARKER.sub("", text)
    return fit_text(text)


def load_batches(chat_dir: Path) -> list[dict[str, Any]]:
    """A chat's batches (one per session); each batch's ``turns`` are exchanges, lists of messages."""
    batches: list[dict[str, Any]] = json.loads((chat_dir / "chat.json").read_text(encoding="utf-8"))
    return batches


def chat_numbers(spec: str) -> set[int]:
    """'1-6,18-23' -> {1, ..., 6, 18, ..., 23}."""
    chosen: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        chosen.update(range(int(low), int(high or low) + 1))
    return chosen


def numbered_chats(folder: Path, chosen: set[int] | None) -> list[int]:
    """The chat numbers under a BEAM chats folder that have a chat.json (those chosen, when a choice is given)."""
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and (p / "chat.json").exists()
                  and (chosen is None or int(p.name) in chosen))
