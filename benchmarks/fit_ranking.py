"""Fit the ranking model (compassmem/retrieval/ranking_model.py) on built memories, with every conversation held out
in turn, and write the weights the package ships.

    python -m benchmarks.fit_ranking --set locomo=LOCOMO.json@MEMORY_DIR --set beam=BEAM.json@MEMORY_DIR ...
                                     [--out compassmem/retrieval/ranking_model.json] [--report results/fit.json]

Each set is a conversation style's name (sets of one style are pooled), a questions file in the LoCoMo layout (``benchmarks/beam_to_locomo.py`` converts user <-> assistant
chats to it) and the folder of a memory built from it (``benchmarks.locomo_recall --data-dir``). Every question of
categories 1-4 with evidence is asked once; the engine's candidate turns and their features
(``QueryEngine.candidate_features``) are kept. The model is a weighted sum of the features, fitted by a softmax over
each question's candidates (the evidence turns are what it should put first) with an L2 penalty.

Validation, grouped by conversation: for each conversation of every set, a model fitted on all the others ranks its
questions through the real engine (diversity, speaker hedge and reserved places included), beside the hand-chosen
weights on the same memory. The table gives recall@10 per conversation and per set; the weights written are fitted
on everything, with the held-out figures kept beside them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from scipy.optimize import minimize

from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.embedding.embedders import make_embedder
from compassmem.evaluation.locomo_questions import Question, load_locomo_questions
from compassmem.evaluation.recall import recall_at
from compassmem.core.logging_setup import configure_logging
from compassmem.library.memory import Memory
from compassmem.retrieval.engine import EngineConfig, QueryEngine, RankingConfig
from compassmem.retrieval.ranking_model import BASE_FEATURES, FEATURES, RankingModel, shipped_model

CATEGORIES = (1, 2, 3, 4)
BUDGET = 20
# The weights of the features themselves are the hand-chosen ones (RankingConfig), not fitted: on chats between
# people they beat fitted ones held out (docs/decisions/003-fitted-ranking.md). What is fitted is how each weight
# changes with the length of the turns (the NAME*long features): an assistant's answers are not ranked like chat lines.
_HAND = EngineConfig(ranking=RankingConfig(fitted=False)).ranking_model().weights
FIXED: dict[str, float] = {name: _HAND.get(name, 0.0) for name in BASE_FEATURES}


class Candidates(BaseModel, arbitrary_types_allowed=True):
    """One question's candidate turns: features (turns x FEATURES) and which turns are evidence."""

    style: str
    question: Question
    features: np.ndarray
    gold: np.ndarray


def parse_set(spec: str) -> tuple[str, Path, Path]:
    name, _, rest = spec.partition("=")
    data, _, folder = rest.partition("@")
    if not (name and data and folder):
        raise argparse.ArgumentTypeError("a set is NAME=QUESTIONS.json@MEMORY_DIR")
    return name, Path(data), Path(folder)


def collect(engine: QueryEngine, style: str, questions: Sequence[Question]) -> list[Candidates]:
    out = []
    for question in questions:
        refs, features = engine.candidate_features(QueryRequest(conversation_id=question.conversation_id,
                                                                question=question.question, budget_turns=BUDGET))
        if not refs:
            continue
        gold = np.asarray([ref.turn_id in question.evidence for ref in refs], dtype=bool)
        matrix = np.column_stack([features[name] for name in FEATURES]).astype(np.float64)
        out.append(Candidates(style=style, question=question, features=matrix, gold=gold))
    return out


def fit(examples: Sequence[Candidates], l2: float, fixed: Mapping[str, float]) -> dict[str, float]:
    """Weights that maximise the softmax probability of each question's evidence turns among its candidates. The
    ``fixed`` weights are kept as given and set the scale (the softmax has a temperature of its own); the others
    are fitted, with an L2 penalty on them as the softmax sees them. Each set (conversation style) counts as much
    as any other, however many questions it has."""
    usable = [e for e in examples if e.gold.any()]
    per_style = {style: sum(1 for e in usable if e.style == style) for style in {e.style for e in usable}}
    share = {style: 1.0 / (count * len(per_style)) for style, count in per_style.items()}
    free = np.asarray([name not in fixed for name in FEATURES])
    start = np.asarray([fixed.get(name, 0.0) for name in FEATURES])

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        weights = start.copy()
        weights[free] = theta[:-1]
        tau = float(np.exp(theta[-1]))
        total, grad, grad_tau = 0.0, np.zeros_like(weights), 0.0
        for example in usable:
            scores = example.features @ weights
            logits = tau * scores
            p = np.exp(logits - logits.max())
            p /= p.sum()
            gold = example.gold / example.gold.sum()
            share_of = share[example.style]
            total -= share_of * float(gold @ np.log(p + 1e-12))
            grad += share_of * tau * (example.features.T @ (p - gold))
            grad_tau += share_of * tau * float(scores @ (p - gold))
        fitted = theta[:-1]
        penalty = l2 * tau * tau * float(fitted @ fitted)
        return total + penalty, np.append(grad[free] + 2 * l2 * tau * tau * fitted, grad_tau + 2 * penalty)

    result = minimize(loss, np.zeros(int(free.sum()) + 1), jac=True, method="L-BFGS-B")
    weights = start.copy()
    weights[free] = result.x[:-1]
    return {name: round(float(w), 5) for name, w in zip(FEATURES, weights, strict=True)}


def engine_recall(engine: QueryEngine, questions: Sequence[Question], budget: int = 10) -> list[float]:
    return [recall_at(engine.query(QueryRequest(conversation_id=q.conversation_id, question=q.question,
                                                 budget_turns=BUDGET)).turn_ids, q.evidence, budget)
            for q in questions]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="sets", type=parse_set, action="append", required=True)
    parser.add_argument("--out", type=Path, help="write the weights fitted on every set here")
    parser.add_argument("--report", type=Path, default=Path("results/fit_ranking.json"))
    parser.add_argument("--l2", type=float, default=0.001)
    parser.add_argument("--no-validation", action="store_true", help="fit on every set without the held-out folds")
    parser.add_argument("--refit-all", action="store_true",
                        help="fit every feature's weight, not only the shape terms (the turn's fused score keeps its "
                             "hand weight and sets the scale): for a new embedder, whose channels the hand weights "
                             "were not chosen for")
    parser.add_argument("--fit-only", action="append", default=[], metavar="FEATURE",
                        help="keep the shipped weights and fit only this feature and its shape term (repeatable): "
                             "for a new feature such as rerank; the held-out figures compare with the shipped weights")
    args = parser.parse_args(argv)
    if args.fit_only:
        fitted_names = {*args.fit_only, *(f"{name}*long" for name in args.fit_only)}
        fixed = {name: w for name, w in shipped_model().weights.items() if name not in fitted_names}
        fixed |= {name: 0.0 for name in FEATURES if name not in fixed and name not in fitted_names}
        base, label = EngineConfig(), "shipped"
    else:
        fixed = {"fused": FIXED["fused"]} if args.refit_all else FIXED
        base, label = EngineConfig(ranking=RankingConfig(fitted=False)), "hand"
    configure_logging("WARNING")
    stores: list[tuple[str, Memory, list[Question]]] = []
    examples: list[Candidates] = []
    for name, data, folder in args.sets:
        questions = [q for q in load_locomo_questions(data)[0] if q.category in CATEGORIES and q.evidence]
        settings = Settings(data_dir=folder, embedder="onnx-int8", llm_url=None)
        # The weights beside which each fold's fitted model is measured: the hand-chosen ones, or with --fit-only
        # the shipped ones.
        memory = Memory(settings, embedder=make_embedder(settings), engine_config=base)
        stores.append((name, memory, questions))
        collected = collect(memory.engine, name, questions)
        examples += collected
        print(f"{name} ({data.name}): {len(questions)} questions, {sum(e.gold.any() for e in collected)} with "
              f"evidence among the candidates", flush=True)
    rows = []
    for name, memory, questions in [] if args.no_validation else stores:
        for conversation in sorted({q.conversation_id for q in questions}):
            held = [q for q in questions if q.conversation_id == conversation]
            train = [e for e in examples if (e.style, e.question.conversation_id) != (name, conversation)]
            model = RankingModel(source=f"fold {name}/{conversation}", weights=fit(train, args.l2, fixed))
            fitted = QueryEngine(memory.embedder, memory.stores.vectors, memory.hot, EngineConfig(model=model),
                                 reranker=memory.engine.reranker)
            hand, ours = engine_recall(memory.engine, held), engine_recall(fitted, held)
            rows.append({"set": name, "conversation": conversation, "questions": len(held),
                         "hand": 100 * float(np.mean(hand)), "fitted": 100 * float(np.mean(ours))})
            print(f"{name:8s} {conversation:14s} {len(held):4d}  {label} {rows[-1]['hand']:5.1f}  "
                  f"fitted (held out) {rows[-1]['fitted']:5.1f}", flush=True)
    summary: dict[str, float] = {}
    print(f"\n{'set':8s} {'questions':>9s} {label + ' @10':>9s} {'fitted @10, held out':>21s}")
    for name in dict.fromkeys(name for name, _, _ in stores):
        chosen = [r for r in rows if r["set"] == name]
        n = sum(r["questions"] for r in chosen)
        if not n:
            continue
        hand = sum(r["hand"] * r["questions"] for r in chosen) / n
        fitted = sum(r["fitted"] * r["questions"] for r in chosen) / n
        summary[f"{name}_hand_at10"], summary[f"{name}_fitted_at10"] = round(hand, 2), round(fitted, 2)
        print(f"{name:8s} {n:9d} {hand:9.1f} {fitted:21.1f}")
    final = RankingModel(source="fitted by benchmarks/fit_ranking.py on " + ", ".join(
        f"{name} {data.name}" for name, data, _ in args.sets), weights=fit(examples, args.l2, fixed))
    final.validation = summary
    print("\nweights fitted on every set:", json.dumps(final.weights))
    if args.out:
        args.out.write_text(json.dumps(final.model_dump(), indent=2) + "\n", encoding="utf-8")
        print(f"written to {args.out}")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"folds": rows, "summary": summary, "model": final.model_dump()}, indent=2),
                           encoding="utf-8")
    for _, memory, _ in stores:
        memory.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
