"""Event boundaries against human topic-shift labels: Pk and WindowDiff of the boundary detector and baselines.

    python -m benchmarks.segmentation --data PATH [--split dev] [--out results/segmentation.json]
    python -m benchmarks.segmentation --data PATH --fit [--fit-split train]

The data is a JSON list of dialogues in the format of the Dialogue-Topic-Segmenter data hub:
``{"dial_id", "utterances": [...], "segments": [n1, n2, ...], "set": "train"|"dev"|...}``, where ``segments`` are
the sizes of consecutive topic segments. Its path comes from ``--data`` or the ``SEGMENTATION_DATA`` environment
variable; nothing is downloaded. No speakers or times are given: two speakers alternate ("A" and "B"), 30 seconds
apart, all in one session, and each dialogue is one conversation.

The detector is fed exactly as the pipeline feeds it: every turn's ``search_text()`` embedding (speaker and date
included), one turn at a time, the open segment closed at the end. Baselines over the same embeddings, same run:
no cuts; random cuts, as many as the human ones (the mean of ``--random-draws`` seeded draws); TextTiling-style
depth scoring (cosine of the two-turn blocks either side of each gap, depth of each valley from its nearest
peaks, a cut where the depth is above mean - sd/2 of the dialogue's valley depths, Hearst's liberal cutoff), on the
search-text embeddings and on embeddings of the plain utterances (one more embedding pass, cached).

Metrics: Pk and WindowDiff per dialogue (lower is better; k = half the mean human segment length, rounded, at
least 2: segeval's convention), averaged over dialogues; cuts per dialogue next to the human count.

``--fit`` refits the detector's topic-shift model (``SHIFT_BIAS``, ``SHIFT_WEIGHTS`` in
``compassmem/processors/segmentation.py``) on ``--fit-split`` and picks the threshold there (the lowest Pk with
the cut count within 15% of the human one), then prints both to paste in. Fit on `train`, report on `dev`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS_DIR, cached_vectors, print_table, write_results
from compassmem.config import Settings
from compassmem.embedding import Embedder, make_embedder
from compassmem.models import Turn
from compassmem.processors import segmentation
from compassmem.processors.segmentation import (
    SHIFT_FEATURES,
    BoundaryDetector,
    BoundaryReason,
    ContextTurn,
    SegmentationConfig,
    SegmenterState,
    shift_features,
)

DATA_VARIABLE = "SEGMENTATION_DATA"
START = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
SPEAKERS = ("A", "B")
# --fit picks the threshold with the lowest Pk on the fit split among those whose cut count is this close to the
# human count.
CUT_TOLERANCE = 0.15


@dataclass
class Dialogue:
    dial_id: str
    utterances: list[str]
    segments: list[int]
    split: str

    @property
    def gold(self) -> list[int]:
        """Indices of the utterances that start a new topic (never 0)."""
        cuts, at = [], 0
        for size in self.segments[:-1]:
            at += size
            cuts.append(at)
        return cuts

    def turns(self) -> list[Turn]:
        return [Turn(conversation_id=f"dialogue-{self.dial_id}", turn_id=f"{self.dial_id}:{index}",
                     speaker=SPEAKERS[index % 2], text=text, session_id="1",
                     timestamp=START + timedelta(seconds=30 * index))
                for index, text in enumerate(self.utterances)]


def load_dialogues(path: Path) -> list[Dialogue]:
    dialogues = []
    for item in json.loads(path.read_text()):
        utterances = [u if u.strip() else "..." for u in item["utterances"]]
        if sum(item["segments"]) != len(utterances):
            raise ValueError(f"dialogue {item['dial_id']}: segments {item['segments']} do not add up to "
                             f"{len(utterances)} utterances")
        dialogues.append(Dialogue(str(item["dial_id"]), utterances, list(item["segments"]), item.get("set", "")))
    return dialogues


# --- metrics ----------------------------------------------------------------------------------------------


def labels(size: int, cuts: Sequence[int]) -> list[int]:
    """The segment number of each utterance."""
    starts, number, out = set(cuts), 0, []
    for index in range(size):
        number += index in starts
        out.append(number)
    return out


def window(segments: Sequence[int]) -> int:
    """k: half the mean reference segment length, rounded (half to even), at least 2 (segeval's convention)."""
    return max(2, int(round(sum(segments) / len(segments) / 2)))


def pk_windowdiff(reference: list[int], hypothesis: list[int], k: int) -> tuple[float, float] | None:
    """Pk and WindowDiff of two label sequences; None when the dialogue is not longer than k."""
    probes = len(reference) - k
    if probes <= 0:
        return None
    pk = sum((reference[i] == reference[i + k]) != (hypothesis[i] == hypothesis[i + k]) for i in range(probes))
    wd = sum((reference[i + k] - reference[i]) != (hypothesis[i + k] - hypothesis[i]) for i in range(probes))
    return pk / probes, wd / probes


def score(dialogues: Sequence[Dialogue], cuts: dict[str, list[int]]) -> dict[str, float]:
    pks, wds = [], []
    for dialogue in dialogues:
        size = len(dialogue.utterances)
        result = pk_windowdiff(labels(size, dialogue.gold), labels(size, cuts[dialogue.dial_id]),
                               window(dialogue.segments))
        if result is not None:
            pks.append(result[0])
            wds.append(result[1])
    return {"pk": float(np.mean(pks)), "windowdiff": float(np.mean(wds)),
            "cuts_per_dialogue": float(np.mean([len(cuts[d.dial_id]) for d in dialogues])),
            "gold_cuts_per_dialogue": float(np.mean([len(d.gold) for d in dialogues])), "dialogues": len(pks)}


# --- the detector and the baselines -----------------------------------------------------------------------


def detector_cuts(dialogue: Dialogue, vectors: np.ndarray, detector: BoundaryDetector,
                  reasons: Counter[str] | None = None) -> list[int]:
    """Feed the dialogue's turns one at a time as the pipeline does; the utterances that open a segment."""
    state, turns = SegmenterState(), dialogue.turns()
    position = {turn.turn_id: index for index, turn in enumerate(turns)}
    closed = []
    for turn, vector in zip(turns, vectors, strict=True):
        closed.extend(detector.step(state, turn, vector))
    last = detector.close(state, BoundaryReason.END)
    if last is not None:
        closed.append(last)
    starts = []
    for segment in closed[:-1]:
        if reasons is not None:
            reasons[segment.boundary_reason.value] += 1
        # A segment's closing reason is the boundary after it: the next segment starts after its last turn.
        starts.append(position[segment.turns[-1].turn.turn_id] + 1)
    return starts


def texttiling_cuts(vectors: np.ndarray, block: int = 2) -> list[int]:
    """TextTiling-style depth scoring over the embeddings (see the module docstring)."""
    size = len(vectors)
    if size < 3:
        return []
    gaps = []
    for index in range(1, size):
        left = vectors[max(0, index - block):index].mean(axis=0)
        right = vectors[index:index + block].mean(axis=0)
        gaps.append(float(left @ right / (np.linalg.norm(left) * np.linalg.norm(right) + 1e-9)))
    depth = np.zeros(len(gaps))
    for j, value in enumerate(gaps):
        if (j > 0 and gaps[j - 1] < value) or (j < len(gaps) - 1 and gaps[j + 1] < value):
            continue  # not a valley
        left_peak, a = value, j
        while a > 0 and gaps[a - 1] >= left_peak:
            a -= 1
            left_peak = gaps[a]
        right_peak, b = value, j
        while b < len(gaps) - 1 and gaps[b + 1] >= right_peak:
            b += 1
            right_peak = gaps[b]
        depth[j] = left_peak + right_peak - 2 * value
    valleys = depth[depth > 0]
    if not len(valleys):
        return []
    cutoff = valleys.mean() - valleys.std() / 2
    return [j + 1 for j, d in enumerate(depth) if d > 0 and d > cutoff]


def random_cuts(dialogue: Dialogue, rng: random.Random) -> list[int]:
    return sorted(rng.sample(range(1, len(dialogue.utterances)), len(dialogue.gold)))


# --- embeddings -------------------------------------------------------------------------------------------


def embed_cached(embedder: Embedder, texts: list[str], cache_dir: Path | None,
                 label: str) -> np.ndarray:
    settings = Settings(_env_file=None)
    return cached_vectors(embedder.embed, embedder.dim, texts, f"{settings.embedder}:{settings.embedding_model}",
                          cache_dir, f"segmentation-{label}")


def vectors_by_dialogue(dialogues: Sequence[Dialogue], vectors: np.ndarray) -> dict[str, np.ndarray]:
    out, at = {}, 0
    for dialogue in dialogues:
        out[dialogue.dial_id] = vectors[at:at + len(dialogue.utterances)]
        at += len(dialogue.utterances)
    return out


# --- fitting the topic-shift model ------------------------------------------------------------------------


class RecordingDetector(BoundaryDetector):
    """Records the features of every boundary the topic-shift model decides, with the turn it would cut before."""

    def __init__(self, config: SegmentationConfig | None = None) -> None:
        super().__init__(config)
        self.rows: list[tuple[str, list[float]]] = []

    def shift_probability(self, state: SegmenterState, following: ContextTurn) -> float:
        features = shift_features(state.context, following, self.centre_offset(state))
        self.rows.append((state.open_turns[-1].turn.turn_id, features))
        return super().shift_probability(state, following)


def fit(dialogues: Sequence[Dialogue], vectors: dict[str, np.ndarray], config: SegmentationConfig) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    recorder = RecordingDetector(config)
    for dialogue in dialogues:
        detector_cuts(dialogue, vectors[dialogue.dial_id], recorder)
    gold = {f"{d.dial_id}:{cut}" for d in dialogues for cut in d.gold}
    features = np.asarray([row for _, row in recorder.rows])
    targets = np.asarray([turn_id in gold for turn_id, _ in recorder.rows], dtype=int)
    model = LogisticRegression(C=1.0, max_iter=5000).fit(features, targets)
    segmentation.SHIFT_BIAS = float(model.intercept_[0])
    segmentation.SHIFT_WEIGHTS = tuple(float(w) for w in model.coef_[0])
    choices = []
    for threshold in np.round(np.arange(0.20, 0.70, 0.01), 2):
        detector = BoundaryDetector(config.model_copy(update={"shift_threshold": float(threshold)}))
        result = score(dialogues, {d.dial_id: detector_cuts(d, vectors[d.dial_id], detector) for d in dialogues})
        choices.append((float(threshold), result))
    admissible = [c for c in choices
                  if abs(c[1]["cuts_per_dialogue"] - c[1]["gold_cuts_per_dialogue"])
                  <= CUT_TOLERANCE * c[1]["gold_cuts_per_dialogue"]] or choices
    threshold, result = min(admissible, key=lambda c: c[1]["pk"])
    return {"bias": segmentation.SHIFT_BIAS, "weights": dict(zip(SHIFT_FEATURES, segmentation.SHIFT_WEIGHTS,
                                                                    strict=True)),
            "threshold": threshold, "fit_split_result": result, "gaps": len(targets),
            "positive_share": float(targets.mean())}


# --- main -------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(os.environ[DATA_VARIABLE]) if os.environ.get(DATA_VARIABLE) else None
    parser.add_argument("--data", type=Path, default=default, help=f"data-hub JSON (or set {DATA_VARIABLE})")
    parser.add_argument("--split", default="dev", help="the 'set' to report ('all': every dialogue)")
    parser.add_argument("--fit", action="store_true", help="refit the topic-shift model and print it")
    parser.add_argument("--fit-split", default="train")
    parser.add_argument("--random-draws", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-plain-baseline", action="store_true",
                        help="leave out TextTiling on plain-utterance embeddings (saves an embedding pass)")
    parser.add_argument("--vector-cache", type=Path, default=RESULTS_DIR / "cache")
    parser.add_argument("--no-vector-cache", dest="vector_cache", action="store_const", const=None)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "segmentation.json")
    args = parser.parse_args(argv)
    if args.data is None or not args.data.exists():
        where = f"at {args.data}" if args.data is not None else "(no path given)"
        print(f"skipped: segmentation data not found {where}; pass --data PATH or set {DATA_VARIABLE}",
              file=sys.stderr)
        return 0
    started = time.perf_counter()
    every = load_dialogues(args.data)
    split = args.fit_split if args.fit else args.split
    dialogues = [d for d in every if split == "all" or d.split == split]
    if not dialogues:
        print(f"error: no dialogue with set {split!r} in {args.data}", file=sys.stderr)
        return 2
    embedder = make_embedder(Settings(_env_file=None))
    turns = [turn for d in dialogues for turn in d.turns()]
    search = vectors_by_dialogue(dialogues, embed_cached(embedder, [t.search_text() for t in turns],
                                                         args.vector_cache, "search"))
    config = SegmentationConfig()
    if args.fit:
        fitted = fit(dialogues, search, config)
        print(f"fitted on {len(dialogues)} dialogues ({split}), {fitted['gaps']} gaps the model decides, "
              f"{fitted['positive_share']:.1%} of them human boundaries")
        print(f"SHIFT_BIAS = {fitted['bias']:.3f}")
        print("SHIFT_WEIGHTS: tuple[float, ...] = (" + ", ".join(f"{w:.3f}" for w in fitted["weights"].values())
              + ")")
        print(f"shift_threshold = {fitted['threshold']:.2f}  ->  on {split}: {fitted['fit_split_result']}")
        write_results(args.out.with_name(args.out.stem + "_fit.json"), {"split": split, **fitted})
        return 0

    reasons: Counter[str] = Counter()
    detector = BoundaryDetector(config)
    methods: dict[str, Callable[[Dialogue], list[int]]] = {
        "compassmem detector": lambda d: detector_cuts(d, search[d.dial_id], detector, reasons),
        "texttiling (search-text embeddings)": lambda d: texttiling_cuts(search[d.dial_id]),
    }
    if not args.no_plain_baseline:
        plain = vectors_by_dialogue(dialogues, embed_cached(embedder, [t.text for t in turns], args.vector_cache,
                                                            "plain"))
        methods["texttiling (plain-text embeddings)"] = lambda d: texttiling_cuts(plain[d.dial_id])
    methods["no cuts"] = lambda d: []
    results: dict[str, dict[str, float]] = {}
    for name, method in methods.items():
        results[name] = score(dialogues, {d.dial_id: method(d) for d in dialogues})
    draws = [score(dialogues, {d.dial_id: random_cuts(d, random.Random(f"{args.seed}:{draw}:{d.dial_id}"))
                               for d in dialogues}) for draw in range(args.random_draws)]
    results[f"random, human count ({args.random_draws} draws)"] = {
        key: float(np.mean([draw[key] for draw in draws])) for key in draws[0]}

    print(f"\n{args.data.name}, set {split}: {len(dialogues)} dialogues, {len(turns)} utterances "
          "(Pk, WindowDiff: lower is better)")
    print_table(["method", "Pk", "WindowDiff", "cuts/dialogue", "human cuts/dialogue"],
                [[name, r["pk"], r["windowdiff"], f"{r['cuts_per_dialogue']:.2f}", f"{r['gold_cuts_per_dialogue']:.2f}"]
                 for name, r in results.items()])
    print(f"detector boundaries by reason: {dict(reasons)}")
    seconds = time.perf_counter() - started
    write_results(args.out, {
        "benchmark": "topic segmentation, Pk and WindowDiff", "data": args.data.name, "split": split,
        "dialogues": len(dialogues), "utterances": len(turns),
        "metric_window": "k = round(mean gold segment / 2), >= 2",
        "config": config.model_dump(mode="json"), "methods": results, "detector_boundaries": dict(reasons),
        "seconds": seconds,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
