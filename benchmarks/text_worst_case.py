"""Worst-case turn text: processing time per 16 KiB turn built to be hard, next to ordinary turns.

    python -m benchmarks.text_worst_case [--rounds 5] [--history 600] [--out results/text_worst_case.json]

Each case is one valid turn (at most 16 KiB of UTF-8) ingested through the in-process ``MemoryPipeline``
with the real embedder, into a conversation that already holds ``--history`` ordinary turns (a fresh copy
of the same memory state for every measurement, so no case sees another's events). The time reported is
the processing past the embedder: the pipeline observer's segment, merge, relate and recluster stages (event
frame, time resolution, relation cues, ...), without ``embed`` (shown for scale) and without stores (none are
attached). The goal: at most 50 ms per turn, whatever the text. Ordinary turns are measured in the same run:
a short chat turn and a 16 KiB turn of ordinary varied sentences, the baseline of the ratio column.

Cases: text without a sentence end (the issue: [.!?] + space was the only split, and the cue patterns'
leading ``(.*)`` retried from every position), repeated cue words, Japanese text (no [.!?] at all), digit
runs and date-like fragments (thousands of time-rule matches), capitalised names before a long space run
(the entity pattern's nested whitespace quantifiers), thousands of tiny sentences, emoji.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.common import RESULTS_DIR, print_table, write_results
from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.core.models import MAX_TEXT_BYTES, Turn
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.processors.conversation_memory import ConversationMemoryState, MemoryUpdate

TENANT = "default"
CONVERSATION = "worst-case"
START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
NOT_PROCESSING = {"embed", "store"}

_SUBJECTS = ["I", "We", "My sister", "Caroline", "Melanie", "My friend Jon", "Our team", "She"]
_VERBS = ["went to", "visited", "talked about", "signed up for", "finished", "started", "painted", "planned"]
_OBJECTS = ["the park", "a pottery class", "the lake near Boston", "a charity run", "the new cafe",
            "a support group", "the museum", "a camping trip", "the concert", "the library"]
_TAILS = ["yesterday", "last weekend", "with the kids", "because it was sunny", "and it was great",
          "after work", "two weeks ago", "for the first time", "so we can relax", "in May"]


def ordinary_sentence(rng: random.Random) -> str:
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}."


def clip(text: str) -> str:
    """At most 16 KiB of UTF-8 (cut on a character boundary), as a turn may be."""
    return text.encode("utf-8")[:MAX_TEXT_BYTES].decode("utf-8", "ignore")


def fill(unit: str) -> str:
    return clip(unit * (MAX_TEXT_BYTES // len(unit.encode("utf-8")) + 1))


def cases(rng: random.Random, history_words: list[str]) -> dict[str, str]:
    ordinary = clip(" ".join(ordinary_sentence(rng) for _ in range(600)))
    # Sentences whose cause clause restates a history event by its rare words: every sentence is a cue match
    # with a clause to look up among the earlier events.
    restating = clip(" ".join(f"I left because {history_words[i % len(history_words)]} "
                              f"{history_words[(i + 1) % len(history_words)]}." for i in range(2000)))
    return {
        "ordinary short turn": "I went to the park yesterday with my dog because it was sunny. It was great!",
        "ordinary 16 KiB turn": ordinary,
        "no sentence end (words)": fill("word "),
        "run-on sentence, cue words": fill("I went out because it was sunny and so that we can "),
        "repeated 'because'": fill("because "),
        "repeated 'if'": fill("if "),
        "repeated 'so that'": fill("so that "),
        "repeated ', since'": fill("x, since "),
        "repeated ', so'": fill("a, so "),
        "repeated 'led to'": fill("led to "),
        "cue sentences restating events": restating,
        "Japanese text": fill("今日は公園に行きました。天気がとても良かったので、友達とお弁当を食べました"),
        "Japanese, no punctuation": fill("今日は公園に行きました天気がとても良かったです"),
        "digit run": fill("1234567890"),
        "digits and spaces": fill("12 "),
        "date fragments": fill("in May 2019 on 2020-05-08 3 days ago "),
        "'May' without context": fill("May "),
        "years after 'in'": fill("in 2019 "),
        "capitalised name, long space run": "Al" + " " * (MAX_TEXT_BYTES - 3) + "x",
        "'. ' repeated (8k sentences)": fill(". "),
        "emoji": fill("😀👩‍👩‍👧"),
    }


class StageClock:
    """Pipeline observer: seconds per stage of the last ingest."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()

    def stage(self, stage: str, seconds: float, turns: int | None = None) -> None:
        self.seconds[stage] += seconds

    def memory_update(self, update: MemoryUpdate) -> None:
        pass


def history_state(embedder: Embedder, turns: int, rng: random.Random,
                  ) -> tuple[ConversationMemoryState, list[str]]:
    """A conversation of ``turns`` ordinary turns, 6 a session, each naming made-up places and people (so that
    the sessions become distinct events, and cue clauses have rare words to match them by)."""
    def made_up() -> str:
        return "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)) + rng.choice("nrsx")

    words = [made_up() for _ in range(turns)]
    history = [
        Turn(tenant=TENANT, conversation_id=CONVERSATION, turn_id=f"h{index}", speaker=("Ann", "Bob")[index % 2],
             text=f"{ordinary_sentence(rng)} We stayed in {words[index].title()} near {words[index - 1]} with "
                  f"{made_up().title()} and talked about {made_up()} and {made_up()}.",
             timestamp=START + timedelta(days=index // 6, minutes=index % 6), session_id=str(index // 6))
        for index in range(turns)
    ]
    pipeline = MemoryPipeline(embedder, [], PipelineConfig())
    pipeline.ingest(history)
    return pipeline.memory_for(TENANT, CONVERSATION).to_state().model_copy(deep=True), words


def measure(embedder: Embedder, state: ConversationMemoryState, text: str,
            number: int) -> tuple[float, float]:
    """(processing ms, embedding ms) for one turn ingested into a fresh copy of ``state``."""
    clock = StageClock()
    pipeline = MemoryPipeline(embedder, [], PipelineConfig(), observer=clock)
    pipeline.memory_for(TENANT, CONVERSATION).restore(state.model_copy(deep=True))
    last = state.events[-1].temporal_info.end if state.events else START
    turn = Turn(tenant=TENANT, conversation_id=CONVERSATION, turn_id=f"x{number}", speaker="Ann", text=text,
                timestamp=last + timedelta(days=1), session_id="measured")
    pipeline.ingest([turn])  # closes the turn's segment at the end: its event, relations, time anchors
    processing = sum(s for stage, s in clock.seconds.items() if stage not in NOT_PROCESSING)
    return processing * 1000, clock.seconds["embed"] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="measurements per case (median and max reported)")
    parser.add_argument("--history", type=int, default=600, help="ordinary turns already in the conversation")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "text_worst_case.json")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    embedder = make_embedder(Settings(_env_file=None))
    embedder.embed(["warm-up: the first call pays for lazy initialisation"])
    started = time.perf_counter()
    state, words = history_state(embedder, args.history, rng)
    print(f"history: {args.history} turns, {len(state.events)} events ({time.perf_counter() - started:.1f} s)")
    texts = cases(rng, words)
    measure(embedder, state, texts["ordinary short turn"], -1)  # warm-up of the processing path
    samples: dict[str, list[float]] = {name: [] for name in texts}
    embed_ms: dict[str, list[float]] = {name: [] for name in texts}
    for round_number in range(args.rounds):
        for index, (name, text) in enumerate(texts.items()):
            processing, embedding = measure(embedder, state, text, round_number * 100 + index)
            samples[name].append(processing)
            embed_ms[name].append(embedding)
        print(f"round {round_number + 1}/{args.rounds} done")
    baseline = statistics.median(samples["ordinary 16 KiB turn"])
    rows = []
    for name, values in samples.items():
        median = statistics.median(values)
        rows.append([name, len(texts[name]), len(texts[name].encode("utf-8")), median, max(values),
                     median / baseline, statistics.median(embed_ms[name])])
    print(f"\nprocessing per turn past the embedder (ms), {args.rounds} rounds, {args.history} history turns;"
          f" ratio: median / median of the ordinary 16 KiB turn")
    print_table(["case", "chars", "bytes", "median ms", "max ms", "ratio", "embed ms"], rows)
    worst = max(rows, key=lambda row: row[4])
    print(f"\nworst max: {worst[4]:.1f} ms ({worst[0]}); goal: <= 50 ms per turn")
    write_results(args.out, {
        "rounds": args.rounds, "history_turns": args.history, "history_events": len(state.events),
        "baseline": "ordinary 16 KiB turn", "goal_ms": 50,
        "cases": {row[0]: {"chars": row[1], "bytes": row[2], "median_ms": row[3], "max_ms": row[4], "ratio": row[5],
                           "embed_median_ms": row[6], "samples_ms": samples[row[0]]} for row in rows},
    })


if __name__ == "__main__":
    main()
