"""What other clients' long questions cost a short one with the reranker on: the latency of a short question asked
alone, then while ``--clients`` threads keep asking a long question that reranks ``--long-candidates`` turns, in
process, over one LoCoMo-layout conversation.

    python -m benchmarks.rerank_contention --data LOCOMO.json [--conversation conv-26] [--out results/rerank_contention.json]

The long question is about 110 word pieces (it must fit the reranker's 128 together with a turn in the code before
issue #59, so the same script measures both sides). Quiet machine only: no tests, no other benchmark. Run it from
another checkout's root (or with PYTHONPATH set to it) to measure that checkout's code with this script.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, latency_stats, print_table, require_data, write_results
from compassmem.core.config import RERANKER_MODEL, Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.logging_setup import configure_logging
from compassmem.library.memory import Memory
from compassmem.retrieval.engine import EngineConfig, RankingConfig
from compassmem.write.importers import read_turns

SHORT = ["When did she go to the support group?", "What did he paint last week?", "Where did they go camping?",
         "What is her favourite book?", "Who gave him the guitar?"]
LONG = ("Thinking back over everything the two of them told each other across all of those sessions, the plans, the "
        "worries about family and work, the trips they mentioned and the small things that happened in between, "
        "could you find for me the part where one of them explained what had happened at the support group, who "
        "was there and how it made her feel afterwards, and also whether anyone else in the family had gone along with "
        "her on that first evening or on any of the later ones she mentioned when they talked about it again?")


def _ask(memory: Memory, conversation: str, question: str) -> tuple[float, Any]:
    started = time.perf_counter()
    response = memory.query(QueryRequest(conversation_id=conversation, question=question, budget_turns=10))
    return (time.perf_counter() - started) * 1000, getattr(response, "reranked", None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--conversation", default=None, help="the conversation asked (default: the file's first)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--long-candidates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=40, help="short questions asked in each phase")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "rerank_contention.json")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    data = require_data(args.data)
    turns = list(read_turns(data))
    conversation = args.conversation or turns[0].conversation_id
    turns = [t for t in turns if t.conversation_id == conversation]
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(_env_file=None, data_dir=Path(scratch), reranker=RERANKER_MODEL,  # type: ignore[call-arg]
                            llm_url=None, api_view_max_age_s=1e9)
        with Memory(settings) as memory:
            memory.add(turns)
            heavy = Memory(settings, stores=memory.stores, embedder=memory.embedder,
                           engine_config=EngineConfig(ranking=RankingConfig(rerank_candidates=args.long_candidates)))
            for question in SHORT + [LONG]:  # warm-up: the hot tier, the sessions
                _ask(memory, conversation, question)
                _ask(heavy, conversation, question)
            alone = [_ask(memory, conversation, SHORT[n % len(SHORT)])[0] for n in range(args.rounds)]
            long_alone = [_ask(heavy, conversation, LONG)[0] for _ in range(5)]
            stop = threading.Event()
            long_runs: list[tuple[float, Any]] = []
            errors: list[str] = []

            def client() -> None:
                while not stop.is_set():
                    try:
                        long_runs.append(_ask(heavy, conversation, LONG))
                    except Exception as error:  # noqa: BLE001 - the code before the fix fails some: count them
                        errors.append(type(error).__name__)

            threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)  # the clients' queries are under way
            loaded = [_ask(memory, conversation, SHORT[n % len(SHORT)]) for n in range(args.rounds)]
            stop.set()
            for thread in threads:
                thread.join()
    short_alone, short_loaded = latency_stats(alone), latency_stats([ms for ms, _ in loaded])
    long_loaded = latency_stats([ms for ms, _ in long_runs]) if long_runs else {}
    skipped = sum(1 for _, reranked in loaded if reranked == 0)
    long_skipped = sum(1 for _, reranked in long_runs if reranked == 0)
    rows = [["short question alone", short_alone["p50"], short_alone["p99"], "", len(alone)],
            [f"short, {args.clients} clients asking long", short_loaded["p50"], short_loaded["p99"],
             f"{skipped} skipped", len(loaded)],
            ["long question alone", statistics.median(long_alone), max(long_alone), "", len(long_alone)],
            [f"long, {args.clients} clients", long_loaded.get("p50", 0.0), long_loaded.get("p99", 0.0),
             f"{long_skipped} skipped, {len(errors)} failed", len(long_runs)]]
    print(f"conversation {conversation}: {len(turns)} turns; long question reranks {args.long_candidates} turns")
    print_table(["query", "p50 ms", "p99 ms", "reranker", "n"], rows)
    print(f"short question p50 under load / alone: {short_loaded['p50'] / short_alone['p50']:.2f}x")
    write_results(args.out, {"conversation": conversation, "turns": len(turns), "clients": args.clients,
                             "long_candidates": args.long_candidates, "short_alone": short_alone,
                             "short_loaded": short_loaded, "short_skipped": skipped, "long_alone_ms": long_alone,
                             "long_loaded": long_loaded, "long_skipped": long_skipped, "long_errors": errors})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
