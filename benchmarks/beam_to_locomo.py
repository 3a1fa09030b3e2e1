"""Convert BEAM user <-> assistant chats to the LoCoMo layout, so every benchmark reads them like LoCoMo.

    python -m benchmarks.beam_to_locomo --beam PATH/chats/500K --out beam500k.json [--chats 1-8]

BEAM (Tavakoli et al., github mohammadtavakoli78/BEAM) holds LLM-generated chats between a user and an assistant
(coding, maths, planning; assistant answers of thousands of characters) with probing questions and the ids of the
messages that answer them. The repository carries no licence file: use it for evaluation only and never copy it
(nor this script's output) into the repository. The team holds out its 100K chats for its own measurement: convert
the 500K ones.

The layout produced (``compassmem.evaluation.locomo_questions`` reads it):
- one sample per chat, ``sample_id`` ``beam-<n>``, speakers ``user`` and ``assistant``;
- a session starts at every user message that carries a ``time_anchor`` (BEAM's "this happens on <day>"), dated
  that day at noon; messages before the first anchor belong to session 1, dated at the chat's first anchor;
- ``dia_id`` ``D<session>:<position in session>``; BEAM's artifact marker ``->-> x,y`` at the end of a user
  message is dropped (it is the generator's bookkeeping, not something the user said);
- messages above the turn limit (16 KiB of UTF-8) are cut at the last paragraph break under it, and counted;
- questions keep their ability by name (``ability``) and get the LoCoMo category closest to it (below); evidence is
  the ability's ``source_chat_ids`` mapped to dia_ids. Abstention questions have no evidence and are left out,
  as LoCoMo's adversarial ones are by the recall benchmark.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.beam import (
    HELD_OUT,
    HELD_OUT_MESSAGE,
    chat_numbers,
    load_batches,
    message_text,
    numbered_chats,
)
from benchmarks.common import write_dataset

# Ability -> LoCoMo category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial).
ABILITY_CATEGORY: dict[str, int] = {
    "information_extraction": 4,
    "knowledge_update": 4,
    "multi_session_reasoning": 1,
    "summarization": 1,
    "contradiction_resolution": 1,
    "temporal_reasoning": 2,
    "event_ordering": 2,
    "preference_following": 3,
    "instruction_following": 3,
    "abstention": 5,
}


def _session_date(anchor: str) -> str:
    """'January-05-2024' as LoCoMo writes a session's date_time."""
    day = datetime.strptime(anchor, "%B-%d-%Y")
    return f"12:00 pm on {day.day} {day.strftime('%B')}, {day.year}"


def _evidence_ids(source: Any) -> list[int]:
    """Message ids from ``source_chat_ids``: a list, a dict of lists (first and second statement), or nested."""
    if isinstance(source, dict):
        return [i for value in source.values() for i in _evidence_ids(value)]
    if isinstance(source, list):
        return [i for value in source for i in _evidence_ids(value)]
    if isinstance(source, int) or (isinstance(source, str) and source.strip().isdigit()):
        return [int(source)]
    return []


def convert_chat(chat_dir: Path, sample_id: str) -> tuple[dict[str, Any], dict[str, int]]:
    messages = [m for batch in load_batches(chat_dir) for exchange in batch["turns"] for m in exchange]
    first_anchor = next(m["time_anchor"] for m in messages if m.get("time_anchor"))
    conversation: dict[str, Any] = {"speaker_a": "user", "speaker_b": "assistant"}
    dia_of: dict[int, str] = {}
    session, position, cut = 0, 0, 0
    for message in messages:
        if message.get("time_anchor") or session == 0:
            session += 1
            position = 0
            conversation[f"session_{session}_date_time"] = _session_date(message.get("time_anchor") or first_anchor)
            conversation[f"session_{session}"] = []
        position += 1
        text, was_cut = message_text(message)
        cut += was_cut
        dia_id = f"D{session}:{position}"
        dia_of[int(message["id"])] = dia_id
        conversation[f"session_{session}"].append({"speaker": message["role"], "dia_id": dia_id, "text": text})
    probing = json.loads((chat_dir / "probing_questions" / "probing_questions.json").read_text(encoding="utf-8"))
    qa = []
    missing = 0
    for ability, items in probing.items():
        for item in items:
            ids = _evidence_ids(item.get("source_chat_ids"))
            missing += sum(1 for i in ids if i not in dia_of)
            qa.append({"question": item["question"], "category": ABILITY_CATEGORY.get(ability, 3),
                       "ability": ability, "evidence": [dia_of[i] for i in ids if i in dia_of],
                       "answer": str(item.get("answer") or item.get("ideal_answer") or item.get("ideal_response")
                                     or item.get("ideal_summary") or "")})
    sample = {"sample_id": sample_id, "conversation": conversation, "qa": qa}
    return sample, {"messages": len(messages), "sessions": session, "cut": cut, "evidence_missing": missing,
                    "questions": len(qa)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beam", type=Path, required=True, help="a BEAM chats folder, e.g. BEAM/chats/500K")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chats", type=chat_numbers, help="which chats, e.g. '1-8' or '1,3,5' (default: all)")
    args = parser.parse_args(argv)
    if args.beam.name == HELD_OUT:
        parser.error(HELD_OUT_MESSAGE)
    samples = []
    for number in numbered_chats(args.beam, args.chats):
        sample, counts = convert_chat(args.beam / str(number), f"beam-{number}")
        samples.append(sample)
        print(f"beam-{number}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    write_dataset(args.out, samples, "chats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
