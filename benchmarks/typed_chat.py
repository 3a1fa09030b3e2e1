"""Rewrite a LoCoMo-layout file as people type in a chat app, to measure retrieval on that style.

    python -m benchmarks.typed_chat --data LOCOMO.json --out typed.json [--keep-captions]

LoCoMo's turns are written by a language model: one tidy paragraph per turn, capitalised and punctuated, each
shared photo described by a caption. People typing in a chat send a thought as a burst of short messages, mostly in
lower case, without the last full stop, and a photo without words. The same conversations rewritten that way ask
whether a mechanism holds on that style or leans on the tidy one; every baseline of the recall benchmark reads the
same rewritten turns, so the comparison stays fair. Deterministic: the same input gives the same file.

The rewrite, per turn:
- split at sentence ends into messages; a piece under ``MIN_WORDS`` words joins the one before it;
- each message lower-cased and stripped of a final full stop (question and exclamation marks stay);
- messages renumbered in their session (``D<session>:<n>``, so every reader of the layout takes them as turns);
- a photo's caption is dropped (``--keep-captions`` keeps it on the turn's last message); a turn without text (a
  photo alone) is dropped with it.

Evidence: a question's gold turn becomes its messages that share a content word with the answer (the fact sits in
one sentence); when none does (an inferred answer: "Likely yes"), all of its messages. Questions, categories and
answers are kept as they are.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from benchmarks.common import write_dataset
from compassmem.evaluation.locomo_questions import normalise_evidence
from compassmem.text.text_features import keyword_stems

MIN_WORDS = 4
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_SESSION_KEY = re.compile(r"^session_(\d+)$")


def messages_of(text: str) -> list[str]:
    """A turn's text as the messages of a burst: sentences, short ones joined to the one before."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        if pieces and len(sentence.split()) < MIN_WORDS:
            pieces[-1] = f"{pieces[-1]} {sentence}"
        else:
            pieces.append(sentence)
    if len(pieces) > 1 and len(pieces[0].split()) < MIN_WORDS:
        pieces[:2] = [f"{pieces[0]} {pieces[1]}"]
    return [_typed(piece) for piece in pieces if piece.strip()]


def _typed(message: str) -> str:
    message = message.strip().lower()
    return message[:-1] if message.endswith(".") and not message.endswith("..") else message


def rewrite_sample(sample: dict[str, Any], keep_captions: bool) -> dict[str, Any]:
    """The sample with its turns rewritten and its questions' evidence mapped to the new turns."""
    conversation = dict(sample["conversation"])
    new_ids: dict[str, list[tuple[str, str]]] = {}
    for key, turns in sample["conversation"].items():
        match = _SESSION_KEY.match(key)
        if not match or not isinstance(turns, list):
            continue
        rewritten: list[dict[str, Any]] = []
        for turn in turns:
            messages = messages_of(str(turn.get("text", "")))
            pairs = []
            for index, message in enumerate(messages):
                dia_id = f"D{match.group(1)}:{len(rewritten) + 1}"
                new_turn: dict[str, Any] = {"speaker": turn["speaker"], "dia_id": dia_id, "text": message}
                if keep_captions and index == len(messages) - 1 and turn.get("blip_caption"):
                    new_turn["blip_caption"] = turn["blip_caption"]
                rewritten.append(new_turn)
                pairs.append((dia_id, message))
            new_ids[str(turn.get("dia_id"))] = pairs
        conversation[key] = rewritten
    qa = [{**item, "evidence": _mapped_evidence(item, new_ids)} for item in sample.get("qa") or []]
    return {"sample_id": sample["sample_id"], "conversation": conversation, "qa": qa}


def _mapped_evidence(item: dict[str, Any], new_ids: dict[str, list[tuple[str, str]]]) -> list[str]:
    answer = set(keyword_stems(str(item.get("answer") or "")))
    mapped: list[str] = []
    for old in normalise_evidence(item.get("evidence") or [], set(new_ids)):
        pairs = new_ids[old]
        holding = [dia_id for dia_id, text in pairs if answer & set(keyword_stems(text))]
        mapped.extend(holding or [dia_id for dia_id, _ in pairs])
    return mapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a file in the LoCoMo layout")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep-captions", action="store_true", help="keep a shared photo's caption")
    args = parser.parse_args(argv)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    write_dataset(args.out, [rewrite_sample(s, args.keep_captions) for s in samples], "conversations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
