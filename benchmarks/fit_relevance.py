"""Fit the relevance and answerability models (compassmem/retrieval/relevance.py) on a built memory, with every
conversation held out in turn, and write the models the package ships.

    python -m benchmarks.fit_relevance --data LOCOMO.json --data-dir MEMORY_DIR [--build]
                                       [--out compassmem/retrieval/relevance_model.json]
                                       [--json results/fit_relevance.json] [--plot docs/relevance-reliability.png]

Every question of the file is asked (``explain: true``, 20 turns) of its own conversation, and again of another
conversation of the file (the next one, in file order): a question asked of the wrong conversation has no evidence
there. Categories 1-4 are answerable; LoCoMo's category 5 (questions about what was never said) and the
wrong-conversation questions are not. Every returned turn of an answerable question is labelled evidence or not by
the file; every turn of an unanswerable one is not evidence.

The turn model is a logistic regression of TURN_INPUTS; the question model one of QUESTION_INPUTS over the turn
model's output, with answerable and unanswerable questions weighted equally (so a probability of 0.5 means even
odds when half the questions asked have an answer in memory). Validation is grouped by the conversation asked: for
each conversation, models fitted on every question asked of the others score the questions asked of it. The table
gives, held out, the expected calibration error of turn relevance, the AUROC of answerable against category 5 and
against wrong-conversation questions, and what a ``min_relevance`` threshold keeps of the evidence in the first 10
turns and of the turns returned for unanswerable questions. The models written are fitted on everything.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from scipy.optimize import minimize

from benchmarks.common import print_table, require_data, write_results
from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.logging_setup import configure_logging
from compassmem.embedding.embedders import make_embedder
from compassmem.evaluation.calibration import auroc, calibration
from compassmem.evaluation.locomo_questions import Question, load_locomo_questions
from compassmem.library.memory import Memory
from compassmem.retrieval.relevance import (
    QUESTION_INPUTS,
    TURN_INPUTS,
    Logistic,
    RelevanceModel,
    question_inputs,
)
from compassmem.write.importers import read_turns

BUDGET = 20
ANSWERABLE = (1, 2, 3, 4)
UNANSWERABLE_CATEGORY = 5
THRESHOLDS = (0.02, 0.05, 0.1, 0.2, 0.3)
L2 = 0.01


class Asked(BaseModel, arbitrary_types_allowed=True):
    """One question asked of one conversation: its returned turns' inputs and labels."""

    asked_of: str
    kind: str  # "answerable", "category 5" or "wrong conversation"
    turns: np.ndarray  # returned turns x TURN_INPUTS
    evidence: np.ndarray  # per returned turn
    coverage: float
    top_cosine: float
    names: bool
    speaker: float

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


def ask(memory: Memory, question: Question, conversation: str, kind: str) -> Asked:
    response = memory.query(QueryRequest(conversation_id=conversation, question=question.question,
                                         budget_turns=BUDGET, explain=True))
    explained = response.explanation
    assert explained is not None
    rows = [[turn.relevance_inputs.get(name, 0.0) for name in TURN_INPUTS] for turn in explained.turns]
    evidence = [kind == "answerable" and turn.turn_id in question.evidence for turn in explained.turns]
    inputs = explained.answerable_inputs
    return Asked(asked_of=conversation, kind=kind, turns=np.asarray(rows, dtype=np.float64).reshape(-1, len(TURN_INPUTS)),
                 evidence=np.asarray(evidence, dtype=bool), coverage=inputs.get("coverage", 0.0),
                 top_cosine=inputs.get("top_cosine", 0.0), names=bool(inputs.get("names", 0.0)),
                 speaker=inputs.get("speaker", 0.0))


def fit_logistic(x: np.ndarray, y: np.ndarray, weights: np.ndarray, names: Sequence[str]) -> Logistic:
    """Weighted logistic regression with a small L2 penalty on the weights (inputs standardised while fitting)."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / scale
    w_total = weights.sum()

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        logits = theta[0] + z @ theta[1:]
        p = 1 / (1 + np.exp(-logits))
        eps = 1e-12
        value = -np.sum(weights * (y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))) / w_total
        value += L2 * np.sum(theta[1:] ** 2)
        residual = weights * (p - y) / w_total
        grad = np.concatenate([[residual.sum()], z.T @ residual + 2 * L2 * theta[1:]])
        return float(value), grad

    theta = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B").x
    coefficients = theta[1:] / scale
    return Logistic(intercept=round(float(theta[0] - np.sum(coefficients * mean)), 6),
                    weights={name: round(float(c), 6) for name, c in zip(names, coefficients, strict=True)})


def fit_turn_model(asked: Sequence[Asked]) -> Logistic:
    with_turns = [a for a in asked if len(a.turns)]
    x = np.vstack([a.turns for a in with_turns])
    y = np.concatenate([a.evidence for a in with_turns]).astype(np.float64)
    return fit_logistic(x, y, _turn_weights(with_turns), TURN_INPUTS)


def _turn_weights(asked: Sequence[Asked]) -> np.ndarray:
    # Each question counts once, whatever number of turns it returned.
    return np.concatenate([np.full(len(a.turns), 1.0 / len(a.turns)) for a in asked if len(a.turns)])


def fit_turn_calibration(asked: Sequence[Asked]) -> list[tuple[float, float]]:
    """Isotonic regression of evidence on the turn model's probability, over predictions each made by a turn model
    fitted without the conversation asked (cross-fitting: in-sample probabilities would look better calibrated
    than they are). The probabilities are first pooled into CALIBRATION_POINTS bins of equal weight, so the map
    has few points; none when there is one conversation only."""
    conversations = list(dict.fromkeys(a.asked_of for a in asked))
    if len(conversations) < 2:
        return []
    given, outcomes, held_all = [], [], []
    for conversation in conversations:
        held = [a for a in asked if a.asked_of == conversation and len(a.turns)]
        partial = RelevanceModel(source="fold", turn=fit_turn_model([a for a in asked if a.asked_of != conversation]),
                                 question=Logistic(intercept=0.0, weights={}))
        given += [turn_probabilities(partial, a) for a in held]
        outcomes += [a.evidence for a in held]
        held_all += held
    # The weights in the order the predictions were made (by conversation asked, not the questions' order).
    return isotonic_points(np.concatenate(given), np.concatenate(outcomes).astype(np.float64),
                           _turn_weights(held_all))


CALIBRATION_POINTS = 100


def isotonic_points(p: np.ndarray, y: np.ndarray, w: np.ndarray) -> list[tuple[float, float]]:
    """(mean probability, weighted evidence share) of equal-weight bins of ``p``, made non-decreasing by pooling
    adjacent violators."""
    order = np.argsort(p, kind="stable")
    p, y, w = p[order], y[order], w[order]
    edges = np.searchsorted(np.cumsum(w) / w.sum(), np.linspace(0, 1, CALIBRATION_POINTS + 1)[1:-1])
    blocks = [[float(np.average(p[i], weights=w[i])), float(np.average(y[i], weights=w[i])), float(w[i].sum())]
              for i in np.split(np.arange(len(p)), edges) if len(i)]
    pooled: list[list[float]] = []
    for block in blocks:
        pooled.append(block)
        while len(pooled) > 1 and pooled[-2][1] >= pooled[-1][1]:
            (p1, y1, w1), (p2, y2, w2) = pooled.pop(-2), pooled.pop()
            pooled.append([(p1 * w1 + p2 * w2) / (w1 + w2), (y1 * w1 + y2 * w2) / (w1 + w2), w1 + w2])
    return [(round(given, 6), round(observed, 6)) for given, observed, _ in pooled]


def fit_models(asked: Sequence[Asked], source: str) -> RelevanceModel:
    partial = RelevanceModel(source=source, turn=fit_turn_model(asked), question=Logistic(intercept=0.0, weights={}),
                             turn_calibration=fit_turn_calibration(asked))
    rows = [question_row(partial, a) for a in asked]
    labels = np.asarray([a.answerable for a in asked], dtype=np.float64)
    positives = max(1.0, labels.sum())
    negatives = max(1.0, len(labels) - labels.sum())
    # Answerable and unanswerable questions weigh the same in all; the two kinds of unanswerable ones the same too.
    kinds = {kind: sum(1 for a in asked if a.kind == kind) for kind in {a.kind for a in asked}}
    unanswerable_kinds = [kind for kind in kinds if kind != "answerable"]
    question_weights = np.asarray([
        1.0 / positives if a.answerable else 1.0 / (len(unanswerable_kinds) * kinds[a.kind]) * 1.0
        for a in asked])
    question_weights *= len(asked) / question_weights.sum()
    del negatives
    question = fit_logistic(np.asarray(rows), labels, question_weights, QUESTION_INPUTS)
    return partial.model_copy(update={"question": question})


def question_row(model: RelevanceModel, asked: Asked) -> list[float]:
    relevance = turn_probabilities(model, asked)
    inputs = question_inputs(relevance, asked.coverage, asked.top_cosine, asked.names, asked.speaker)
    return [float(inputs[name][0]) for name in QUESTION_INPUTS]


def turn_probabilities(model: RelevanceModel, asked: Asked) -> np.ndarray:
    if not len(asked.turns):
        return np.zeros(0)
    return model.turn_relevance(_turn_columns(asked))


def reported_relevance(model: RelevanceModel, asked: Asked) -> np.ndarray:
    """The relevance a returned turn carries: the turn model's probability through the calibration map."""
    return model.calibrated(turn_probabilities(model, asked))


def _turn_columns(asked: Asked) -> dict[str, np.ndarray]:
    return {name: asked.turns[:, i] for i, name in enumerate(TURN_INPUTS)}


def answerable_probability(model: RelevanceModel, asked: Asked) -> float:
    relevance = turn_probabilities(model, asked)
    return model.answerable(question_inputs(relevance, asked.coverage, asked.top_cosine, asked.names, asked.speaker))


def measure(scored: Sequence[tuple[RelevanceModel, Asked]]) -> dict[str, float | None]:
    """Held-out figures of questions each scored by the model that did not see their conversation."""
    relevance, outcomes, answerable_relevance, answerable_outcomes = [], [], [], []
    probabilities: dict[str, list[float]] = {}
    kept = {t: [0, 0] for t in THRESHOLDS}  # evidence in the first 10 turns: kept, all
    emptied: dict[tuple[str, float], list[int]] = {}  # unanswerable questions per kind: left with no turn, all
    for model, asked in scored:
        p = reported_relevance(model, asked)
        relevance += p.tolist()
        outcomes += asked.evidence.tolist()
        if asked.answerable:
            answerable_relevance += p.tolist()
            answerable_outcomes += asked.evidence.tolist()
        probabilities.setdefault(asked.kind, []).append(answerable_probability(model, asked))
        for threshold in THRESHOLDS:
            if asked.answerable:
                first = asked.evidence[:10]
                kept[threshold][0] += int((first & (p[:10] >= threshold)).sum())
                kept[threshold][1] += int(first.sum())
            else:
                counts = emptied.setdefault((asked.kind, threshold), [0, 0])
                counts[0] += int(not (p >= threshold).any())
                counts[1] += 1
    every = calibration(relevance, outcomes)
    of_answerable = calibration(answerable_relevance, answerable_outcomes)
    positives = probabilities.get("answerable", [])
    figures: dict[str, float | None] = {
        "turn_relevance_ece": every.ece if every else None,
        "turn_relevance_ece_answerable_questions": of_answerable.ece if of_answerable else None,
        "answerable_auroc_category_5": auroc(positives, probabilities.get("category 5", [])),
        "answerable_auroc_wrong_conversation": auroc(positives, probabilities.get("wrong conversation", [])),
    }
    for kind, values in probabilities.items():
        figures[f"answerable_true_share_{kind.replace(' ', '_')}"] = round(float(np.mean(np.asarray(values) >= 0.5)), 4)
    for threshold in THRESHOLDS:
        figures[f"evidence_at10_kept_min_relevance_{threshold}"] = (
            round(kept[threshold][0] / kept[threshold][1], 4) if kept[threshold][1] else None)
        for (kind, at), (empty, count) in emptied.items():
            if at == threshold and count:
                figures[f"emptied_{kind.replace(' ', '_')}_min_relevance_{threshold}"] = round(empty / count, 4)
    return figures


def collect(memory: Memory, questions: Sequence[Question]) -> list[Asked]:
    conversations = list(dict.fromkeys(q.conversation_id for q in questions))
    following = {c: conversations[(i + 1) % len(conversations)] for i, c in enumerate(conversations)}
    asked = []
    for number, question in enumerate(questions, 1):
        if question.category in ANSWERABLE:
            asked.append(ask(memory, question, question.conversation_id, "answerable"))
        elif question.category == UNANSWERABLE_CATEGORY:
            asked.append(ask(memory, question, question.conversation_id, "category 5"))
        if len(conversations) > 1 and question.category in ANSWERABLE:
            asked.append(ask(memory, question, following[question.conversation_id], "wrong conversation"))
        if number % 200 == 0:
            print(f"  asked {number} of {len(questions)} questions", flush=True)
    return asked


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="a LoCoMo-layout questions file (default: $LOCOMO_DATA)")
    parser.add_argument("--data-dir", type=Path, required=True, help="the memory built from it")
    parser.add_argument("--build", action="store_true", help="build the memory from --data first")
    parser.add_argument("--out", type=Path, help="write the models fitted on every conversation here")
    parser.add_argument("--json", type=Path, default=Path("results/fit_relevance.json"))
    parser.add_argument("--plot", type=Path, help="write the held-out reliability plot and the answerable "
                                                  "histograms here (PNG; needs matplotlib: pip install '.[bench]')")
    args = parser.parse_args(argv)
    data = require_data(args.data)
    configure_logging("WARNING")
    settings = Settings(data_dir=args.data_dir, embedder="onnx-int8", llm_url=None)
    questions = load_locomo_questions(data)[0]
    with Memory(settings, embedder=make_embedder(settings)) as memory:
        if args.build:
            memory.add(read_turns(data))
        asked = collect(memory, questions)
    conversations = list(dict.fromkeys(a.asked_of for a in asked))
    scored, rows = [], []
    for conversation in conversations:
        model = fit_models([a for a in asked if a.asked_of != conversation], f"fold {conversation}")
        held = [(model, a) for a in asked if a.asked_of == conversation]
        scored += held
        figures = measure(held)
        rows.append([conversation, len(held), figures["turn_relevance_ece"],
                     figures["answerable_auroc_category_5"], figures["answerable_auroc_wrong_conversation"]])
    held_out = measure(scored)
    rows.append(["all, held out", len(scored), held_out["turn_relevance_ece"],
                 held_out["answerable_auroc_category_5"], held_out["answerable_auroc_wrong_conversation"]])
    print_table(["conversation asked", "questions", "turn ECE", "AUROC vs cat. 5", "AUROC vs wrong conv."],
                [[c, n, _figure(e), _figure(a), _figure(w)] for c, n, e, a, w in rows])
    print_table(["min_relevance", "evidence @10 kept", "category 5 left empty", "wrong conversation left empty"],
                [[t, _figure(held_out[f"evidence_at10_kept_min_relevance_{t}"]),
                  _figure(held_out.get(f"emptied_category_5_min_relevance_{t}")),
                  _figure(held_out.get(f"emptied_wrong_conversation_min_relevance_{t}"))] for t in THRESHOLDS])
    if args.plot:
        plot_reliability(scored, args.plot, data.name)
        print(f"plot written to {args.plot}")
    final = fit_models(asked, f"fitted by benchmarks/fit_relevance.py on {data.name}, every conversation")
    final.validation = {name: value for name, value in held_out.items() if value is not None}
    if args.out:
        args.out.write_text(json.dumps(final.model_dump(), indent=2) + "\n", encoding="utf-8")
        print(f"written to {args.out}")
    write_results(args.json, {"held_out": held_out, "folds": rows, "model": final.model_dump(),
                              "questions": {kind: sum(1 for a in asked if a.kind == kind)
                                            for kind in dict.fromkeys(a.kind for a in asked)}})
    return 0


def plot_reliability(scored: Sequence[tuple[RelevanceModel, Asked]], path: Path, source: str) -> None:
    """Two panels of held-out figures: turn relevance per bin against the share of evidence among its turns (on
    the diagonal when calibrated; each point's size is its turn count), and ``answerable_probability`` per kind of
    question."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    relevance = np.concatenate([reported_relevance(m, a) for m, a in scored])
    outcomes = np.concatenate([a.evidence for _, a in scored])
    table = calibration(relevance.tolist(), outcomes.tolist())
    assert table is not None
    figure, (reliability, answerable) = plt.subplots(1, 2, figsize=(11, 4.6))
    figure.suptitle(f"Held out by conversation ({source}): turn relevance and answerable")
    filled = [b for b in table.bins if b.count]
    reliability.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    reliability.scatter([b.mean_probability for b in filled], [b.observed for b in filled],
                        s=[12 + 140 * (b.count / max(c.count for c in filled)) ** 0.5 for b in filled], zorder=3,
                        label="a bin of returned turns (size: turns)")
    reliability.plot([b.mean_probability for b in filled], [b.observed for b in filled], linewidth=1)
    for b in filled:
        reliability.annotate(str(b.count), (b.mean_probability, b.observed), textcoords="offset points",
                             xytext=(6, -10), fontsize=7)
    reliability.set_xlabel("relevance given")
    reliability.set_ylabel("share that is evidence")
    reliability.set_title(f"turn relevance: ECE {table.ece:.3f} over {table.count} turns", fontsize=10)
    reliability.set_xlim(0, 1)
    reliability.set_ylim(0, 1)
    reliability.legend(loc="upper left", fontsize=8)
    kinds: dict[str, list[float]] = {}
    for model, asked in scored:
        kinds.setdefault(asked.kind, []).append(answerable_probability(model, asked))
    positives = kinds.get("answerable", [])
    for kind, values in kinds.items():
        area = "" if kind == "answerable" else f", AUROC {auroc(positives, values) or 0:.3f}"
        answerable.hist(values, bins=20, range=(0, 1), alpha=0.55, density=True,
                        label=f"{kind} ({len(values)}{area})")
    answerable.set_xlabel("answerable_probability")
    answerable.set_ylabel("density")
    answerable.set_title("answerable, by kind of question", fontsize=10)
    answerable.legend(loc="upper center", fontsize=8)
    for axis in (reliability, answerable):
        axis.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _figure(value: object) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    raise SystemExit(main())
