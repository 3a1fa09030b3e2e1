"""Event boundaries against human labels on every development set at once: Pk and WindowDiff of the boundary
detector and baselines, one table.

    python -m benchmarks.segmentation --data PATH [PATH ...] [--split dev[,test]] [--out results/segmentation.json]
    python -m benchmarks.segmentation --data PATH [PATH ...] --fit [--fit-split train]

Each data file is a JSON list of dialogues in the format of the Dialogue-Topic-Segmenter data hub:
``{"dial_id", "utterances": [...], "segments": [n1, n2, ...], "set": "train"|"dev"|...}``, where ``segments`` are
the sizes of consecutive topic segments, and optionally ``"speakers": [...]`` (one name per utterance). The paths
come from ``--data`` or the ``SEGMENTATION_DATA`` environment variable (several joined by ``:``); nothing is
downloaded. Without speakers, two alternate ("A" and "B"); turns are 30 seconds apart, all in one session, and each
dialogue is one conversation. The development sets and their recipes: TIAGE (chit-chat, given), task dialogues
joined from the Schema-Guided Dialogue corpus (`benchmarks/task_dialogues.py`), user <-> assistant chats from BEAM
(`benchmarks/beam_requests.py`); `benchmarks/DATA.md` has their sources and licences.

The detector is fed exactly as the pipeline feeds it: every turn's ``search_text()`` embedding (speaker and date
included), one turn at a time, the open segment closed at the end. Baselines over the same embeddings, same run:
no cuts; random cuts, as many as the human ones (the mean of ``--random-draws`` seeded draws); TextTiling-style
depth scoring (cosine of the two-turn blocks either side of each gap, depth of each valley from its nearest
peaks, a cut where the depth is above mean - sd/2 of the dialogue's valley depths, Hearst's liberal cutoff), on the
search-text embeddings and (unless ``--no-plain-baseline``) on embeddings of the plain utterances.

Metrics: Pk and WindowDiff per dialogue (lower is better; k = half the mean human segment length, rounded, at
least 2: segeval's convention), averaged over dialogues; cuts per dialogue next to the human count, and segments
per human segment over the whole set (for assistant chats: events per user request).

``--fit`` refits the detector's two models (``SHIFT_*`` and ``REQUEST_*`` in ``compassmem/processors/segmentation.py``)
on ``--fit-split`` of every file given, each on the gaps it decides there, picks both thresholds (the lowest mean Pk
over the sets a model decides, with every such set's cut count within 25% of the human one), and prints them to
paste in. Fit on `train`, report on `dev` (and `test` where a set has one).
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
from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.core.models import Turn
from compassmem.processors import segmentation
from compassmem.processors.segmentation import (
    REQUEST_FEATURES,
    SHIFT_FEATURES,
    BoundaryDetector,
    BoundaryReason,
    ContextTurn,
    SegmentationConfig,
    SegmenterState,
)

DATA_VARIABLE = "SEGMENTATION_DATA"
START = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
# --fit picks each threshold with the lowest mean Pk on the fit sets among those whose cut counts are all this close
# to the human counts; a set joins a model's choice when the model decides at least MIN_FIT_ROWS of its gaps.
CUT_TOLERANCE = 0.25
MIN_FIT_ROWS = 500
SPEAKERS = ("A", "B")


@dataclass
class Dialogue:
    dial_id: str
    utterances: list[str]
    segments: list[int]
    split: str
    speakers: list[str] | None = None

    @property
    def gold(self) -> list[int]:
        """Indices of the utterances that start a new topic (never 0)."""
        cuts, at = [], 0
        for size in self.segments[:-1]:
            at += size
            cuts.append(at)
        return cuts

    def turns(self) -> list[Turn]:
        speakers = self.speakers or [SPEAKERS[index % 2] for index in range(len(self.utterances))]
        return [Turn(conversation_id=f"dialogue-{self.dial_id}", turn_id=f"{self.dial_id}:{index}",
                     speaker=speakers[index], text=text, session_id="1",
                     timestamp=START + timedelta(seconds=30 * index))
                for index, text in enumerate(self.utterances)]


def load_dialogues(path: Path) -> list[Dialogue]:
    dialogues = []
    for item in json.loads(path.read_text()):
        utterances = [u if u.strip() else "..." for u in item["utterances"]]
        if sum(item["segments"]) != len(utterances):
            raise ValueError(f"dialogue {item['dial_id']}: segments {item['segments']} do not add up to "
                             f"{len(utterances)} utterances")
        speakers = item.get("speakers")
        if speakers is not None and len(speakers) != len(utterances):
            raise ValueError(f"dialogue {item['dial_id']}: {len(speakers)} speakers for {len(utterances)} utterances")
        dialogues.append(Dialogue(str(item["dial_id"]), utterances, list(item["segments"]), item.get("set", ""),
                                  speakers))
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
    found, gold = [len(cuts[d.dial_id]) for d in dialogues], [len(d.gold) for d in dialogues]
    return {"pk": float(np.mean(pks)), "windowdiff": float(np.mean(wds)),
            "cuts_per_dialogue": float(np.mean(found)), "gold_cuts_per_dialogue": float(np.mean(gold)),
            # Segments per human segment over the set: for assistant chats, events per user request.
            "segments_per_gold": (sum(found) + len(found)) / (sum(gold) + len(gold)), "dialogues": len(pks)}


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


@dataclass
class DataSet:
    """The dialogues of one split of one data file, with their embeddings."""

    name: str
    split: str
    dialogues: list[Dialogue]
    search: dict[str, np.ndarray]
    plain: dict[str, np.ndarray] | None = None


# --- fitting the topic-shift model ------------------------------------------------------------------------


class RecordingDetector(BoundaryDetector):
    """Records the features of every boundary a model decides, with the turn it would cut before and whether the
    request model (True) or the topic-shift model (False) decides it."""

    def __init__(self, config: SegmentationConfig | None = None) -> None:
        super().__init__(config)
        self.rows: list[tuple[str, bool, list[float]]] = []

    def features(self, state: SegmenterState, following: ContextTurn) -> tuple[bool, list[float]]:
        by_request, features = super().features(state, following)
        self.rows.append((state.open_turns[-1].turn.turn_id, by_request, features))
        return by_request, features


def _logistic_fit(rows: Sequence[list[float]], targets: Sequence[bool]) -> tuple[float, tuple[float, ...]]:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, max_iter=5000).fit(np.asarray(rows), np.asarray(targets, dtype=int))
    return float(model.intercept_[0]), tuple(float(w) for w in model.coef_[0])


def score_sets(sets: Sequence[DataSet], config: SegmentationConfig) -> dict[str, dict[str, float]]:
    detector = BoundaryDetector(config)
    return {f"{data.name} {data.split}": score(data.dialogues, {
        d.dial_id: detector_cuts(d, data.search[d.dial_id], detector) for d in data.dialogues}) for data in sets}


def _pick(sets: Sequence[DataSet], config: SegmentationConfig, field: str, grid: Sequence[float],
          judged: Sequence[str]) -> tuple[float, dict[str, dict[str, float]]]:
    """The value of ``field`` with the lowest mean Pk over the ``judged`` sets among those whose cut counts there
    are all within CUT_TOLERANCE of the human ones (all values when none is)."""
    choices = []
    for value in grid:
        results = score_sets([s for s in sets if f"{s.name} {s.split}" in judged],
                             config.model_copy(update={field: float(value)}))
        chosen = list(results.values())
        close = all(abs(r["cuts_per_dialogue"] - r["gold_cuts_per_dialogue"])
                    <= CUT_TOLERANCE * r["gold_cuts_per_dialogue"] for r in chosen)
        choices.append((not close, float(np.mean([r["pk"] for r in chosen])), float(value), results))
    _, _, value, results = min(choices, key=lambda c: (c[0], c[1]))
    return value, results


def fit(sets: Sequence[DataSet], config: SegmentationConfig, rounds: int = 3) -> dict[str, Any]:
    """Both models refitted on the gaps each decides in ``sets`` (``rounds`` times, since the request model's own
    cuts change which turn opens the event its features compare with), then their thresholds picked."""
    gold = {f"{d.dial_id}:{cut}" for data in sets for d in data.dialogues for cut in d.gold}
    counts: dict[str, Counter[str]] = {}
    for _ in range(rounds):
        rows: dict[bool, list[tuple[str, list[float], bool]]] = {False: [], True: []}
        for data in sets:
            recorder = RecordingDetector(config)
            for dialogue in data.dialogues:
                detector_cuts(dialogue, data.search[dialogue.dial_id], recorder)
            for turn_id, by_request, features in recorder.rows:
                rows[by_request].append((f"{data.name} {data.split}", features, turn_id in gold))
        segmentation.SHIFT_BIAS, segmentation.SHIFT_WEIGHTS = _logistic_fit(
            [f for _, f, _ in rows[False]], [t for _, _, t in rows[False]])
        segmentation.REQUEST_BIAS, segmentation.REQUEST_WEIGHTS = _logistic_fit(
            [f for _, f, _ in rows[True]], [t for _, _, t in rows[True]])
        counts = {"shift": Counter(name for name, _, _ in rows[False]),
                  "request": Counter(name for name, _, _ in rows[True])}
    shift, _ = _pick(sets, config, "shift_threshold", np.arange(0.20, 0.46, 0.05),
                     [name for name, n in counts["shift"].items() if n >= MIN_FIT_ROWS])
    config = config.model_copy(update={"shift_threshold": shift})
    request, _ = _pick(sets, config, "request_threshold", np.arange(0.30, 0.71, 0.05),
                       [name for name, n in counts["request"].items() if n >= MIN_FIT_ROWS])
    results = score_sets(sets, config.model_copy(update={"request_threshold": request}))
    return {"shift": {"bias": segmentation.SHIFT_BIAS, "threshold": shift,
                      "weights": dict(zip(SHIFT_FEATURES, segmentation.SHIFT_WEIGHTS, strict=True))},
            "request": {"bias": segmentation.REQUEST_BIAS, "threshold": request,
                        "weights": dict(zip(REQUEST_FEATURES, segmentation.REQUEST_WEIGHTS, strict=True))},
            "gaps": {kind: dict(c) for kind, c in counts.items()}, "fit_split_results": results}


def print_fit(fitted: dict[str, Any], out: Path) -> int:
    print(f"gaps each model decides: {fitted['gaps']}")
    for kind, name in (("shift", "SHIFT"), ("request", "REQUEST")):
        model = fitted[kind]
        print(f"{name}_BIAS = {model['bias']:.3f}")
        print(f"{name}_WEIGHTS: tuple[float, ...] = (" + ", ".join(f"{w:.3f}" for w in model["weights"].values())
              + ")")
        print(f"{kind}_threshold = {model['threshold']:.2f}")
    for name, result in fitted["fit_split_results"].items():
        print(f"  {name}: Pk {result['pk']:.3f}, cuts/dialogue {result['cuts_per_dialogue']:.2f} "
              f"(human {result['gold_cuts_per_dialogue']:.2f})")
    write_results(out.with_name(out.stem + "_fit.json"), fitted)
    return 0


# --- main -----------------------------------------------------------------------------------------------


def load_sets(paths: Sequence[Path], splits: Sequence[str], embedder: Embedder, cache_dir: Path | None,
              plain: bool) -> list[DataSet]:
    """Each requested split of each file that has dialogues in it, embedded (search text, and plain text too when
    ``plain``)."""
    sets = []
    for path in paths:
        every = load_dialogues(path)
        for split in splits:
            dialogues = [d for d in every if split == "all" or d.split == split]
            if not dialogues:
                continue
            turns = [turn for d in dialogues for turn in d.turns()]
            label = f"{path.stem}-{split}"
            search = vectors_by_dialogue(dialogues, embed_cached(embedder, [t.search_text() for t in turns],
                                                                 cache_dir, f"{label}-search"))
            texts = vectors_by_dialogue(dialogues, embed_cached(embedder, [t.text for t in turns], cache_dir,
                                                                f"{label}-plain")) if plain else None
            sets.append(DataSet(path.stem, split, dialogues, search, texts))
    return sets


def evaluate(data: DataSet, config: SegmentationConfig, draws: int, seed: int) -> tuple[dict[str, dict[str, float]],
                                                                                       Counter[str]]:
    """Each method's scores on the set, and the detector's boundaries by reason."""
    reasons: Counter[str] = Counter()
    detector = BoundaryDetector(config)
    methods: dict[str, Callable[[Dialogue], list[int]]] = {
        "compassmem detector": lambda d: detector_cuts(d, data.search[d.dial_id], detector, reasons),
        "texttiling (search-text embeddings)": lambda d: texttiling_cuts(data.search[d.dial_id]),
    }
    if data.plain is not None:
        plain = data.plain
        methods["texttiling (plain-text embeddings)"] = lambda d: texttiling_cuts(plain[d.dial_id])
    methods["no cuts"] = lambda d: []
    results = {name: score(data.dialogues, {d.dial_id: method(d) for d in data.dialogues})
               for name, method in methods.items()}
    drawn = [score(data.dialogues, {d.dial_id: random_cuts(d, random.Random(f"{seed}:{draw}:{d.dial_id}"))
                                    for d in data.dialogues}) for draw in range(draws)]
    results[f"random, human count ({draws} draws)"] = {key: float(np.mean([r[key] for r in drawn])) for key in drawn[0]}
    return results, reasons


def data_paths(given: Sequence[Path] | None) -> list[Path]:
    if given:
        return list(given)
    return [Path(p) for p in os.environ.get(DATA_VARIABLE, "").split(os.pathsep) if p]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, nargs="+",
                        help=f"data-hub JSON files (or set {DATA_VARIABLE}, paths joined by {os.pathsep!r})")
    parser.add_argument("--split", default="dev", help="the 'set's to report, comma-separated ('all': every dialogue)")
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
    paths = data_paths(args.data)
    missing = [p for p in paths if not p.exists()]
    if not paths or missing:
        where = f"at {', '.join(map(str, missing))}" if missing else "(no path given)"
        print(f"skipped: segmentation data not found {where}; pass --data PATH or set {DATA_VARIABLE}",
              file=sys.stderr)
        return 0
    started = time.perf_counter()
    splits = [args.fit_split] if args.fit else [s.strip() for s in args.split.split(",") if s.strip()]
    embedder = make_embedder(Settings(_env_file=None))
    sets = load_sets(paths, splits, embedder, args.vector_cache, plain=not (args.fit or args.no_plain_baseline))
    if not sets:
        print(f"error: no dialogue with set {args.split!r} in {', '.join(map(str, paths))}", file=sys.stderr)
        return 2
    config = SegmentationConfig()
    if args.fit:
        return print_fit(fit(sets, config), args.out)

    report, rows = [], []
    for data in sets:
        results, reasons = evaluate(data, config, args.random_draws, args.seed)
        utterances = sum(len(d.utterances) for d in data.dialogues)
        report.append({"data": data.name, "split": data.split, "dialogues": len(data.dialogues),
                       "utterances": utterances, "methods": results, "detector_boundaries": dict(reasons)})
        rows.extend([f"{data.name} {data.split}", name, r["pk"], r["windowdiff"], f"{r['cuts_per_dialogue']:.2f}",
                     f"{r['gold_cuts_per_dialogue']:.2f}", f"{r['segments_per_gold']:.2f}"]
                    for name, r in results.items())
    print("\nPk, WindowDiff: lower is better; segments/human: the method's segments per human one over the set")
    print_table(["set", "method", "Pk", "WindowDiff", "cuts/dialogue", "human cuts/dialogue", "segments/human"],
                rows)
    for entry in report:
        print(f"{entry['data']} {entry['split']}: {entry['dialogues']} dialogues, {entry['utterances']} utterances; "
              f"detector boundaries by reason: {entry['detector_boundaries']}")
    write_results(args.out, {
        "benchmark": "event boundaries, Pk and WindowDiff", "sets": report,
        "metric_window": "k = round(mean gold segment / 2), >= 2", "config": config.model_dump(mode="json"),
        "seconds": time.perf_counter() - started,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
