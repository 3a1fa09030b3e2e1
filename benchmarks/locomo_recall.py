"""LoCoMo evidence recall@5/10/20 of compassmem next to the baselines (compassmem/evaluation/baselines.py), same run.

    python -m benchmarks.locomo_recall [--data PATH] [--out results/locomo_recall.json]
                                       [--data-dir DIR --reuse] [--no-baselines] [--embedder onnx-int8|torch]
                                       [--ablation] [--leave-one-out] [--compare-embedder torch]
                                       [--llm-categories URL]

Memory is built from the turns and session dates only (``Memory.add``: the in-process pipeline into the embedded
stores); questions are read by the evaluation code alone and asked through ``Memory.query`` (QueryEngine.query), the
code path behind POST /v1/query. The embedder is COMPASSMEM_EMBEDDER's unless --embedder names one (run both to
compare the torch reference with onnx-int8, or pass --compare-embedder to build a second memory with the other one
in the same run); the baselines use the same embedder. With --llm-categories the memory is built with the LLM's
category labels (``COMPASSMEM_LLM_CATEGORIES``) and questions are still answered offline. Also reports mean context
tokens returned and query latency p50/p99 (in-process, no HTTP).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from benchmarks.locomo_baselines import COLUMNS, results_json, table_rows
from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.evaluation.baselines import TurnCorpus, locomo_session_dates
from compassmem.evaluation.harness import MethodResult, evaluate_retriever
from compassmem.evaluation.leave_one_out import LeaveOneOut, candidate_changes, leave_one_out
from compassmem.evaluation.locomo_questions import Question, load_locomo_questions
from compassmem.evaluation.memory_recall import MemoryRetriever, baseline_results, memory_corpus, memory_result
from compassmem.evaluation.question_shapes import recall_by_shape as shape_recall
from compassmem.evaluation.recall import BUDGETS, recall_at
from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.library.memory import Memory
from compassmem.core.models import RelationType
from compassmem.retrieval.engine import EngineConfig, RankingConfig
from compassmem.retrieval.navigation import ADJACENT_HOP, CLUSTER_HOP, NavigationConfig


LEAVE_ONE_OUT_BUDGET = 10
ABILITY_BUDGET = 10
# Issue #14's bar for a faster embedder, against the reference, at recall@10: categories 1-4 together within 0.5
# points, and no category more than 1 point lower.
EMBEDDER_BUDGET = 10
EMBEDDER_TOGETHER_POINTS = 0.5
EMBEDDER_CATEGORY_POINTS = 1.0


def _without(steps: set[str]) -> EngineConfig:
    return EngineConfig(navigation=NavigationConfig(skipped_steps=frozenset(steps)))


RELATION_TYPES = {t.value for t in RelationType}
ABLATIONS: dict[str, EngineConfig] = {
    "no walk": EngineConfig(ranking=RankingConfig(walk_weight=0.0)),
    "no relations": _without(RELATION_TYPES | {ADJACENT_HOP}),
    "no entity links": _without({RelationType.SAME_ENTITY.value}),
    "no clusters": _without({CLUSTER_HOP}),
    "no category labels": EngineConfig(ranking=RankingConfig(category_candidates=0, category_weight=0.0)),
    "no walk, no event score": EngineConfig(ranking=RankingConfig(walk_weight=0.0),
                                            model=EngineConfig().ranking_model().without("event")),
    # The whole graph at once (walk, entity layer, relations): without the walk its relations, entity links and
    # clusters change no score, so the entity layer's category labels are what is left to switch off.
    "no graph: no walk, no category labels": EngineConfig(
        ranking=RankingConfig(walk_weight=0.0, category_candidates=0, category_weight=0.0)),
    # The mechanisms of retrieval across conversation styles, each switched off alone.
    "no passage search": EngineConfig(ranking=RankingConfig(passage_candidates=0)),
    "no time channel": EngineConfig(ranking=RankingConfig(time_candidates=0)),
    "no standing-wish feature": EngineConfig(model=EngineConfig().ranking_model().without("wish")),
    "no wish search": EngineConfig(ranking=RankingConfig(wish_candidates=0)),
    "no user-side feature": EngineConfig(model=EngineConfig().ranking_model().without("user_side")),
    "no early feature": EngineConfig(model=EngineConfig().ranking_model().without("early")),
    "hand weights, not the fitted model": EngineConfig(ranking=RankingConfig(fitted=False)),
    # Issue #51's mechanisms: lists that cover sessions (diversity), and the relevance reranker (where
    # COMPASSMEM_RERANKER runs one).
    "no session diversity for lists": EngineConfig(ranking=RankingConfig(aggregate_session_diversity=0.0,
                                                                         aggregate_redundancy=0.0)),
    "no reranker": EngineConfig(ranking=RankingConfig(rerank_candidates=0)),
}


def recall_by_shape(questions: Sequence[Question], result: MethodResult,
                    categories: tuple[int, ...] = (1, 2)) -> dict[str, dict[str, float]]:
    """Recall@B % per question shape (compassmem/evaluation/question_shapes.py) over the given categories."""
    return {shape: {"questions": entry.questions, **{f"recall@{b}": 100 * r for b, r in entry.recall.items()}}
            for shape, entry in shape_recall(questions, result, categories).items()}


def memory_settings(data_dir: Path, embedder: str) -> Settings:
    # No LLM: memory comes from the turns alone and the queries measure the engine alone. No reload by age
    # either: the hot tier keeps what it loaded for the whole run.
    return Settings(data_dir=data_dir, embedder=embedder, llm_url=None, api_view_max_age_s=1e9)


def compassmem_with(embedder_name: str, data: Path, questions: Sequence[Question],
                    corpus: TurnCorpus) -> MethodResult:
    """compassmem's recall with a memory built by another embedder, in a folder of its own."""
    embedder = make_embedder(Settings().model_copy(update={"embedder": embedder_name}))
    with tempfile.TemporaryDirectory() as scratch, \
            Memory(memory_settings(Path(scratch), embedder_name), embedder=embedder) as memory:
        build_memory(data, memory)
        return memory_result(f"compassmem ({embedder_name})", memory, questions, corpus)[0]


def print_embedder_comparison(measured: MethodResult, reference: MethodResult) -> None:
    """Both rows, the difference in points per category, and #14's bar at recall@10."""
    print(f"\ncompassmem with each embedder (same questions; {reference.method} is the reference):")
    headers, rows = table_rows([measured, reference])
    difference = ["difference (points)"]
    for column in COLUMNS:
        ours, theirs = measured.summary.categories.get(column), reference.summary.categories.get(column)
        difference.append("-" if ours is None or theirs is None else "/".join(
            f"{100 * (ours.recall[b] - theirs.recall[b]):+.1f}" for b in BUDGETS))
    print_table(headers, [*rows[:2], difference, rows[2]])
    deltas = {column: 100 * (measured.summary.value(column, EMBEDDER_BUDGET) or 0.0)
              - 100 * (reference.summary.value(column, EMBEDDER_BUDGET) or 0.0) for column in COLUMNS}
    together = deltas.pop(COLUMNS[-1])
    worst = min(deltas, key=lambda column: deltas[column])
    held = abs(together) <= EMBEDDER_TOGETHER_POINTS and deltas[worst] >= -EMBEDDER_CATEGORY_POINTS
    print(f"recall@{EMBEDDER_BUDGET}: 1-4 together {together:+.1f} points (bar: within {EMBEDDER_TOGETHER_POINTS}), "
          f"worst category {worst} {deltas[worst]:+.1f} (bar: no lower than -{EMBEDDER_CATEGORY_POINTS}): "
          + ("held" if held else "not held"))


def build_memory(data: Path, memory: Memory) -> float:
    summary = memory.add(read_turns(data))
    print(f"memory: {summary.events} events from {summary.turns} turns, {sum(summary.relations_by_type.values())} "
          f"relations, built in {summary.seconds:.1f} s")
    return summary.seconds


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "locomo_recall.json")
    parser.add_argument("--data-dir", type=Path, help="keep the built memory here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="query the memory already in --data-dir")
    parser.add_argument("--no-baselines", action="store_true", help="system only (for quick iterations)")
    parser.add_argument("--embedder", choices=["onnx-int8", "torch"],
                        help="the embedder to measure (default: the COMPASSMEM_EMBEDDER setting)")
    parser.add_argument("--ablation", action="store_true",
                        help="also ask every question with parts of the graph switched off (same memory) and print "
                             "recall per variant")
    parser.add_argument("--leave-one-out", action="store_true",
                        help="also answer categories 1-4 with each candidate setting of the hand-chosen weights and "
                             "report recall@10 with each conversation held out of the choice (compassmem/evaluation/"
                             "leave_one_out.py)")
    parser.add_argument("--compare-embedder", choices=["onnx-int8", "torch"],
                        help="also build a memory with this embedder (e.g. the torch reference) and print "
                             "compassmem's recall with both, their difference per category and whether the faster "
                             "one holds recall (1-4 @10 within 0.5 points, no category more than 1 point lower)")
    parser.add_argument("--llm-categories", metavar="URL",
                        help="build the memory with the LLM's category labels from this OpenAI-compatible endpoint "
                             "(COMPASSMEM_LLM_MODEL and COMPASSMEM_LLM_API_KEY apply); questions are still answered "
                             "offline, so the difference is the labels'")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    if args.compare_embedder and args.compare_embedder == (args.embedder or Settings().embedder):
        parser.error(f"--compare-embedder {args.compare_embedder} is the embedder measured already; name the other one")
    data = require_data(args.data)
    configure_logging(args.log_level.upper())
    started = time.perf_counter()
    questions, report = load_locomo_questions(data)
    defaults = Settings()
    chosen = args.embedder or defaults.embedder
    embedder = make_embedder(defaults.model_copy(update={"embedder": chosen}))
    with tempfile.TemporaryDirectory() as scratch:
        settings = memory_settings(args.data_dir or Path(scratch), chosen)
        building = settings.model_copy(update={"llm_url": args.llm_categories, "llm_categories": True}) \
            if args.llm_categories else settings
        with Memory(building, embedder=embedder) as built:
            ingest_seconds = 0.0 if args.reuse else build_memory(data, built)
            # Queries stay offline: an endpoint given for the labels must not also decompose questions.
            memory = built if building is settings else Memory(settings, stores=built.stores, embedder=embedder)
            # The baselines rank the same memory's turns (as `compassmem eval` does), dated as the file dates them.
            corpus = memory_corpus(memory, questions, locomo_session_dates(data))
            compassmem, retriever = memory_result("compassmem", memory, questions, corpus)
            results = [compassmem]
            # Each variant reads the same stores with its own engine (and hot tier); only its recall is reported.
            ablation = ([evaluate_retriever(name, MemoryRetriever(
                Memory(settings, stores=memory.stores, embedder=embedder, engine_config=config),
                budget=max(BUDGETS)), questions)
                for name, config in ABLATIONS.items()] if args.ablation else [])
            held_out = (held_out_recall(memory, settings, embedder, questions) if args.leave_one_out else None)
    compared = compassmem_with(args.compare_embedder, data, questions, corpus) if args.compare_embedder else None
    if not args.no_baselines:
        results += baseline_results(corpus, embedder, questions)
    seconds = time.perf_counter() - started

    print(f"LoCoMo evidence recall on {data.name} with embedder {chosen}: {len(corpus)} turns, "
          f"{report.questions_kept} questions ({report.skipped} skipped without evidence)")
    headers, rows = table_rows(results)
    print_table(headers, rows)
    latencies = retriever.latencies_ms
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    tokens = results[0].mean_context_tokens or {}
    print(f"compassmem query latency (in-process): p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(latencies)} queries; "
          "mean context tokens @" + "/".join(map(str, BUDGETS)) + ": "
          + "/".join(f"{tokens.get(b, 0):.0f}" for b in BUDGETS))
    stage_p50 = {name: statistics.median(values) for name, values in retriever.stages_ms.items()}
    print("compassmem query steps, p50 ms: " + ", ".join(f"{name} {ms:.2f}" for name, ms in stage_p50.items()))
    if ablation:
        print("\nablation (same memory; each row switches one part off):")
        print_table(*table_rows(results[:1] + ablation))
    abilities = sorted({ability for result in results for ability in result.by_ability})
    if abilities:
        print(f"\nrecall@{ABILITY_BUDGET} % by the benchmark's own ability (categories as above):")
        print_table(["ability", "questions", *(r.method for r in results)],
                    [[ability, f"{results[0].by_ability[ability]['questions']:.0f}",
                      *(f"{100 * r.by_ability[ability][str(ABILITY_BUDGET)]:.1f}" for r in results)]
                     for ability in abilities])
    shapes = recall_by_shape(questions, results[0])
    print("\ncompassmem recall by question shape, categories 1-2 (%):")
    print_table(["shape", "questions", *(f"r@{b}" for b in BUDGETS)],
                [[shape, f"{row['questions']:.0f}", *(f"{row[f'recall@{b}']:.1f}" for b in BUDGETS)]
                 for shape, row in shapes.items()])
    if held_out is not None:
        print_leave_one_out(held_out)
    if compared is not None:
        print_embedder_comparison(results[0].model_copy(update={"method": f"compassmem ({chosen})"}), compared)
    print(f"{seconds:.1f} s in all")
    output = results_json(data, report, results, seconds)
    output["compassmem_by_shape"] = shapes
    if abilities:
        output["by_ability"] = {r.method: r.by_ability for r in results}
    if ablation:
        output["ablation"] = results_json(data, report, results[:1] + ablation, seconds)["methods"]
    output["compassmem"] = {"latency_ms": {"p50": p50, "p99": p99, "median": statistics.median(latencies)},
                            "steps_p50_ms": stage_p50,
                            "ingest_seconds": ingest_seconds, "embedder": chosen}
    if held_out is not None:
        output["leave_one_out"] = held_out.model_dump()
    if compared is not None:
        output["compared_embedder"] = {"embedder": args.compare_embedder,
                                       **results_json(data, report, [compared], seconds)["methods"]}
    write_results(args.out, output)
    return 0


def held_out_recall(memory: Memory, settings: Settings, embedder: Embedder,
                    questions: Sequence[Question]) -> LeaveOneOut:
    """Recall@10 of categories 1-4 with every candidate weight setting (same memory), then leave-one-out."""
    asked = [q for q in questions if q.category in (1, 2, 3, 4)]
    # The hand-chosen weights: the ones a person chose by looking at these conversations (the fitted model has its
    # own held-out figures: benchmarks/fit_ranking.py).
    defaults = RankingConfig(fitted=False).model_dump()
    recall: dict[str, list[float]] = {}
    for name, changes in candidate_changes(defaults).items():
        config = EngineConfig(ranking=RankingConfig(**{**defaults, **changes}))
        retriever = MemoryRetriever(Memory(settings, stores=memory.stores, embedder=embedder, engine_config=config),
                                    budget=LEAVE_ONE_OUT_BUDGET)
        recall[name] = [recall_at(retriever.rank(q.conversation_id, q.question), q.evidence, LEAVE_ONE_OUT_BUDGET)
                        for q in asked]
    return leave_one_out(asked, recall)


def print_leave_one_out(result: LeaveOneOut) -> None:
    print(f"\nleave-one-conversation-out, categories 1-4 recall@{LEAVE_ONE_OUT_BUDGET} (%): the weight setting chosen "
          "on the other conversations, scored on the held-out one")
    print_table(["held out", "questions", "chosen on the rest", "held-out recall", "defaults' recall"],
                [[f.conversation_id, str(f.questions), f.chosen, f"{f.recall_chosen:.1f}", f"{f.recall_defaults:.1f}"]
                 for f in result.folds])
    print(f"in-sample, defaults: {result.in_sample_defaults:.1f}; in-sample, best setting ({result.in_sample_best}): "
          f"{result.in_sample_best_recall:.1f}; leave-one-out: {result.held_out:.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
