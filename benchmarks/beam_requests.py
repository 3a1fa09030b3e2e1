"""Build user <-> assistant segmentation data from BEAM chats: one dialogue per session, a gold boundary at every
user message that starts a new request.

    python -m benchmarks.beam_requests --beam PATH/BEAM/chats/500K --out beam_requests.json

BEAM (Tavakoli et al., github mohammadtavakoli78/BEAM) holds LLM-generated chats between a user and an assistant
(coding, maths, planning; answers of thousands of characters). Each chat is a list of batches (a batch is one
session, dated by its first message's ``time_anchor``) whose ``turns`` are exchanges: the user's request, the
answer, and the follow-ups that stay on that request ("hmm, what if ...?"). The first message of an exchange is
the gold start of a request. The repository has no licence file: evaluation only, never copy it (nor this
script's output) into the repository. The team holds out BEAM's 100K chats for its own measurement: this reads
the 500K ones only.

Output, the data-hub format ``benchmarks.segmentation`` reads, with the speakers it accepts besides:
``{"dial_id": "beam-<chat>-<batch>", "utterances", "speakers": ["user", "assistant", ...], "segments": [messages
of each exchange], "set"}``; chats numbered below ``--dev-from`` are ``set`` "train", from there below
``--test-from`` "dev", the others "test". BEAM's
artifact marker ``->-> x,y`` at the end of a user message (the generator's bookkeeping) is dropped, and a message
over the turn limit (16 KiB of UTF-8) keeps its head up to the last paragraph break that fits.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
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


def chat_sessions(chat_dir: Path, number: int, split: str) -> list[dict[str, Any]]:
    dialogues = []
    for batch in load_batches(chat_dir):
        exchanges = [exchange for exchange in batch["turns"] if exchange]
        messages = [m for exchange in exchanges for m in exchange]
        dialogues.append({
            "dial_id": f"beam-{number}-{batch['batch_number']}",
            "utterances": [message_text(m)[0] for m in messages],
            "speakers": [m["role"] for m in messages],
            "segments": [len(exchange) for exchange in exchanges],
            "set": split,
        })
    return dialogues


def split_of(number: int, dev_from: int, test_from: int) -> str:
    return "train" if number < dev_from else "dev" if number < test_from else "test"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beam", type=Path, required=True, help="BEAM's chats/500K folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dev-from", type=int, default=18, help="chats numbered from this one on are 'dev'")
    parser.add_argument("--test-from", type=int, default=24, help="... and from this one on 'test'")
    parser.add_argument("--chats", type=chat_numbers, help="which chats, e.g. '1-6,18-23' (default: all)")
    args = parser.parse_args(argv)
    if args.beam.name == HELD_OUT:
        parser.error(HELD_OUT_MESSAGE)
    numbers = numbered_chats(args.beam, args.chats)
    if not numbers:
        parser.error(f"no <n>/chat.json under {args.beam}")
    out = [dialogue for number in numbers
           for dialogue in chat_sessions(args.beam / str(number), number, split_of(number, args.dev_from,
                                                                                   args.test_from))]
    for split in ("train", "dev", "test"):
        chosen = [d for d in out if d["set"] == split]
        print(f"{split}: {len(chosen)} sessions, {sum(len(d['utterances']) for d in chosen)} messages, "
              f"{sum(len(d['segments']) for d in chosen)} requests")
    write_dataset(args.out, out, "dialogues")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
