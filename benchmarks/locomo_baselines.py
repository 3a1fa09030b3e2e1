"""LoCoMo evidence recall@5/10/20 of the baselines (compassmem/evaluation/baselines.py).

    python benchmarks/locomo_baselines.py [--data PATH/locomo.json] [--out results/baselines.json]
    python -m benchmarks.locomo_baselines ...

Rows: bm25, dense, rrf (the three turn-level baselines), bm25-window3 (the chunk-level baseline: BM25 over
non-overlapping 3-turn chunks of a session) and bm25-window3-sliding (3-turn windows started at every turn; pass
--no-sliding to leave it out). Columns: recall@5/10/20 in percent for categories 1..5 and 1-4 together.
Prints the table on stdout and writes the numbers as JSON (aggregates only, never question text). Skips with a
message (exit 0) when the data file is absent: LoCoMo is CC BY-NC 4.0 and is never copied into the repository.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `compassmem` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results  # noqa: E402
from compassmem.evaluation.harness import MethodResult, evaluate_retriever  # noqa: E402
from compassmem.evaluation.locomo_questions import CATEGORY_NAMES, QuestionReport  # noqa: E402
from compassmem.evaluation.recall import BUDGETS, CATEGORIES, TOGETHER  # noqa: E402

COLUMNS: list[str] = [str(c) for c in CATEGORIES] + [TOGETHER]


def table_rows(results: Sequence[MethodResult], budgets: Sequence[int] = BUDGETS) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: one row per method, one 'r@5/r@10/r@20' cell (percent) per category, then counts."""
    headers = [f"recall@{'/'.join(map(str, budgets))} %"] + [
        "1-4 together" if c == TOGETHER else f"{c} {CATEGORY_NAMES[int(c)]}" for c in COLUMNS
    ]
    rows: list[list[str]] = []
    for result in results:
        cells = [result.method]
        for column in COLUMNS:
            entry = result.summary.categories.get(column)
            cells.append("-" if entry is None else "/".join(f"{100 * entry.recall[b]:.1f}" for b in budgets))
        rows.append(cells)
    if results:
        categories = results[0].summary.categories
        rows.append(["questions"] + [str(categories[c].questions) if c in categories else "0" for c in COLUMNS])
    return headers, rows


def results_json(data: Path, report: QuestionReport, results: Sequence[MethodResult], seconds: float) -> dict[str, Any]:
    return {
        "benchmark": "LoCoMo evidence recall@B",
        "data": str(data),
        "budgets": list(BUDGETS),
        "evidence_normalisation": report.model_dump(mode="json"),
        "methods": {
            r.method: {
                "recall": {k: {str(b): v for b, v in c.recall.items()} for k, c in r.summary.categories.items()},
                "questions": {k: c.questions for k, c in r.summary.categories.items()},
                "mean_context_tokens": None
                if r.mean_context_tokens is None
                else {str(b): v for b, v in r.mean_context_tokens.items()},
                "seconds": round(r.seconds, 3),
            }
            for r in results
        },
        "seconds_total": round(seconds, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo-format JSON file")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "baselines.json", help="JSON output")
    parser.add_argument("--no-sliding", action="store_true", help="leave out the sliding 3-turn window row")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    data = require_data(args.data)

    from compassmem.core.config import Settings
    from compassmem.embedding.embedders import make_embedder
    from compassmem.evaluation.baselines import build_baselines, load_turn_corpus
    from compassmem.evaluation.locomo_questions import load_locomo_questions
    from compassmem.core.logging_setup import configure_logging

    configure_logging(args.log_level.upper())
    started = time.perf_counter()
    questions, report = load_locomo_questions(data)
    corpus = load_turn_corpus(data)
    baselines = build_baselines(corpus, make_embedder(Settings(_env_file=None)), sliding_windows=not args.no_sliding)
    results = [evaluate_retriever(name, r, questions, text_of=corpus.text_of) for name, r in baselines.items()]
    seconds = time.perf_counter() - started

    print(
        f"LoCoMo evidence recall on {data.name}: {len(corpus)} turns, {report.questions_kept} of "
        f"{report.questions_read} questions ({report.skipped} skipped without evidence, per category "
        f"{report.skipped_without_evidence}); evidence entries split {report.entries_split}, ids fixed "
        f"{report.ids_fixed}, dropped {report.ids_dropped} (malformed {report.ids_dropped_malformed}, "
        f"missing turn {report.ids_dropped_missing})"
    )
    headers, rows = table_rows(results)
    print_table(headers, rows)
    print(
        "mean context tokens @" + "/".join(map(str, BUDGETS)) + ": "
        + ", ".join(
            f"{r.method} " + "/".join(f"{r.mean_context_tokens[b]:.0f}" for b in BUDGETS)
            for r in results
            if r.mean_context_tokens
        )
    )
    print(f"{seconds:.1f} s")
    write_results(args.out, results_json(data, report, results, seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
