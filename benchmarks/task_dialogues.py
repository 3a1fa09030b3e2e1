"""Build task-dialogue segmentation data: single-task dialogues of the Schema-Guided Dialogue corpus joined into
conversations of several requests, with a gold boundary where one task ends and the next starts.

    python -m benchmarks.task_dialogues --sgd PATH/dstc8-schema-guided-dialogue --out sgd_joined.json

The Schema-Guided Dialogue corpus (Rastogi et al., AAAI 2020; github google-research-datasets/dstc8-schema-guided-
dialogue) is licensed CC BY-SA 4.0: the joined file is a derived work under the same licence (see
`benchmarks/DATA.md`). Keep it outside the repository and pass its path to `benchmarks.segmentation --data`.

The recipe, the way public segmentation sets of service dialogues are built (whole single-task dialogues joined
in a random order, adjacent ones from different domains):
- a source dialogue is one whose ``services`` list names a single service (one task: finding and booking a
  restaurant is one task), taken whole, user and system alternating from the user's first request to the system's
  farewell; its domain is the service name before the ``_`` (``Restaurants_2`` -> ``Restaurants``);
- each joined dialogue takes ``--min-tasks`` to ``--max-tasks`` source dialogues (uniform), every source dialogue
  used once, no two adjacent ones from one domain;
- SGD's own splits are kept: joined dialogues of its ``train`` dialogues are ``set`` "train", of ``dev`` "dev", of
  ``test`` "test" (``--per-split`` each, fewer when the split's dialogues run out);
- the output is the data-hub format ``benchmarks.segmentation`` reads: ``{"dial_id", "utterances", "segments",
  "set"}`` (``segments``: the turn count of each source dialogue, in order). No speakers are written: user and
  system alternate throughout (every SGD dialogue starts with the user and ends with the system), which is how the
  benchmark feeds a dialogue without speakers.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.common import write_dataset

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class TaskDialogue:
    dialogue_id: str
    domain: str
    utterances: tuple[str, ...]


def single_task_dialogues(corpus: Path, split: str) -> list[TaskDialogue]:
    """The split's dialogues with one service, in file order."""
    found = []
    for path in sorted((corpus / split).glob("dialogues_*.json")):
        for item in json.loads(path.read_text(encoding="utf-8")):
            if len(item["services"]) != 1:
                continue
            speakers = [turn["speaker"] for turn in item["turns"]]
            if speakers[0] != "USER" or speakers[-1] != "SYSTEM" or any(a == b for a, b in pairwise(speakers)):
                continue  # keeps user and system alternating across the joins
            found.append(TaskDialogue(item["dialogue_id"], item["services"][0].split("_")[0],
                                      tuple(turn["utterance"] for turn in item["turns"])))
    return found


def join(pool: Sequence[TaskDialogue], count: int, min_tasks: int, max_tasks: int,
         rng: random.Random) -> list[list[TaskDialogue]]:
    """Up to ``count`` joined dialogues, each source dialogue used once, adjacent ones from different domains."""
    remaining = list(pool)
    rng.shuffle(remaining)
    joined: list[list[TaskDialogue]] = []
    while len(joined) < count:
        wanted = rng.randint(min_tasks, max_tasks)
        chosen: list[TaskDialogue] = []
        for _ in range(wanted):
            index = next((i for i, d in enumerate(remaining) if not chosen or d.domain != chosen[-1].domain), None)
            if index is None:
                break
            chosen.append(remaining.pop(index))
        if len(chosen) < min_tasks:
            break
        joined.append(chosen)
    return joined


def as_data_hub(joined: list[TaskDialogue], split: str, number: int) -> dict[str, Any]:
    return {"dial_id": f"sgd-{split}-{number}",
            "utterances": [u for dialogue in joined for u in dialogue.utterances],
            "segments": [len(dialogue.utterances) for dialogue in joined], "set": split,
            "sources": [dialogue.dialogue_id for dialogue in joined]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sgd", type=Path, required=True, help="the corpus root (holds train/, dev/, test/)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-split", type=int, nargs=3, default=(400, 120, 200), metavar=("TRAIN", "DEV", "TEST"),
                        help="joined dialogues per split")
    parser.add_argument("--min-tasks", type=int, default=3)
    parser.add_argument("--max-tasks", type=int, default=7)
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args(argv)
    if not (args.sgd / "train").is_dir():
        parser.error(f"no train/ folder under {args.sgd}: pass the Schema-Guided Dialogue corpus root")
    rng = random.Random(args.seed)
    out: list[dict[str, Any]] = []
    for split, count in zip(SPLITS, args.per_split, strict=True):
        pool = single_task_dialogues(args.sgd, split)
        joined = join(pool, count, args.min_tasks, args.max_tasks, rng)
        out.extend(as_data_hub(dialogue, split, number) for number, dialogue in enumerate(joined))
        tasks = sum(len(d) for d in joined)
        print(f"{split}: {len(pool)} single-task dialogues, {len(joined)} joined from {tasks} of them "
              f"({tasks / max(1, len(joined)):.2f} tasks each)")
    write_dataset(args.out, out, "dialogues")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
