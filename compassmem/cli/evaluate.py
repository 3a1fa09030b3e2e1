"""``compassmem eval FILE``: recall@k of a team's own labelled questions on its memory, beside plain dense, BM25
and RRF search over the same memory's turns (``compassmem/evaluation/``, the core the LoCoMo benchmark shares)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compassmem.cli.api_key import ApiKeyError, add_api_key_options, api_key_option_given, resolve_api_key
from compassmem.core.config import Settings
from compassmem.core.contracts.limits import MAX_BUDGET_TURNS
from compassmem.core.terminal import echo

DEFAULT_K = "5,10,20"
DEFAULT_BASELINES = "dense,bm25,rrf"
BASELINE_NAMES = ("dense", "bm25", "rrf", "bm25-window3", "bm25-window3-sliding")
# The files eval writes: option -> its attribute.
OUTPUT_OPTIONS = {"--report": "report", "--chart": "chart", "--json": "json"}


class EvalInputError(ValueError):
    """An option of ``compassmem eval`` that cannot be used; the message says which and why."""


def add_eval_command(commands: argparse._SubParsersAction[Any]) -> None:
    command = commands.add_parser(
        "eval", help="recall@k of your own labelled questions, beside dense, BM25 and RRF baselines",
        description="Ask every question of FILE of the memory (the data directory's, in process, or a running API's "
                    "with --url) and measure recall@k: the share of its evidence turns among the first k turns "
                    "returned. The baselines rank the same memory's turns. FILE is a LoCoMo JSON file or JSONL, one "
                    '{"question", "conversation_id", "evidence": [turn ids], "category"?, "tenant"?} a line. '
                    "See docs/evaluate.md.")
    command.add_argument("path", metavar="FILE", help="the questions: LoCoMo JSON, or JSONL (.jsonl)")
    command.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                         help="the memory to measure, in process (COMPASSMEM_DATA_DIR)")
    command.add_argument("--url", help="measure the memory of a running API (compassmem api / dev) instead")
    add_api_key_options(command, whose="the questions' tenant")
    command.add_argument("--tenant", help="the tenant of questions that name none (default: default)")
    command.add_argument("--k", default=DEFAULT_K, metavar="K,K,...",
                         help=f"the budgets of recall@k, comma-separated (default {DEFAULT_K})")
    command.add_argument("--baselines", default=DEFAULT_BASELINES, metavar="NAME,...",
                         help=f"baselines to run beside compassmem (default {DEFAULT_BASELINES}; also "
                              "bm25-window3, bm25-window3-sliding; 'none' for none)")
    command.add_argument("--compare", action="append", default=[], metavar="KEY=VALUE",
                         help="also ask under this runtime setting (e.g. ranking.fitted=false; repeat for several, "
                              "applied together) and show both and the difference; in process only")
    command.add_argument("--unanswerable-category", metavar="CATEGORY",
                         help="the category of your questions whose answer memory does not hold (their evidence "
                              "is where the answer would be): answerable's AUROC is also measured against them "
                              "(a LoCoMo file's is category 5)")
    command.add_argument("--report", type=Path, metavar="FILE.md", help="write a Markdown report")
    command.add_argument("--chart", type=Path, metavar="FILE.png", help="write a PNG bar chart (needs matplotlib)")
    command.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON")
    command.set_defaults(handler=cmd_eval)


def parse_budgets(text: str) -> list[int]:
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise EvalInputError(f"--k {text!r}: give whole numbers separated by commas, e.g. {DEFAULT_K}") from None
    if not budgets or any(not 1 <= k <= MAX_BUDGET_TURNS for k in budgets):
        raise EvalInputError(f"--k {text!r}: each k must be 1 to {MAX_BUDGET_TURNS}")
    return sorted(set(budgets))


def parse_baselines(text: str) -> list[str]:
    if text.strip() == "none":
        return []
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in BASELINE_NAMES]
    if unknown:
        raise EvalInputError(f"--baselines: unknown baseline {unknown[0]!r}; the baselines are "
                             f"{', '.join(BASELINE_NAMES)} (or 'none')")
    return names


def parse_compare(pairs: list[str], over_http: bool) -> dict[str, Any]:
    """KEY=VALUE pairs, each a read-path runtime setting with a value its rule allows."""
    from compassmem.library.runtime_settings import Scope, spec_of

    values: dict[str, Any] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise EvalInputError(f"--compare {pair!r}: give KEY=VALUE, e.g. ranking.fitted=false")
        spec = spec_of(key.strip())  # UnknownSettingError lists the keys
        if spec.scope is not Scope.API:
            raise EvalInputError(f"--compare {key}: it changes how memory is built ({spec.scope.value}), not how it "
                                 "is asked; build a second memory with it (compassmem ingest into another "
                                 "--data-dir) and run compassmem eval on each")
        values[spec.key] = spec.validate(value.strip())
    if values and over_http:
        raise EvalInputError("--compare needs the memory in process (--data-dir): an API answers with the settings "
                             "in force there, and changing one (PUT /v1/config) would change every client's "
                             "answers, so eval does not; run it on the data directory, or on a copy of it")
    return values


def check_outputs(args: argparse.Namespace) -> None:
    """EvalInputError for an output that could not be written, or that would overwrite the questions file or
    another output: checked before any question is asked, not after all of them are."""
    if args.chart is not None and args.chart.suffix.lower() != ".png":
        raise EvalInputError(f"--chart {args.chart}: the chart is a PNG; name a .png file")
    named = [("the questions file", Path(args.path))]
    for option, attribute in OUTPUT_OPTIONS.items():
        path = getattr(args, attribute)
        if path is None:
            continue
        problem = unwritable(path)
        if problem:
            raise EvalInputError(f"{option} {path}: {problem}")
        for other, earlier in named:
            if same_file(path, earlier):
                raise EvalInputError(f"{option} {path}: the same file as {other}, which it would overwrite")
        named.append((option, path))


def unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written (with the directories it lacks created), or None."""
    if path.is_dir():
        return "a directory, not a file"
    if path.exists():
        return None if os.access(path, os.W_OK) else "not writable"
    folder = next(parent for parent in path.absolute().parents if parent.exists())
    if not folder.is_dir():
        return f"{folder} is not a directory"
    return None if os.access(folder, os.W_OK | os.X_OK) else f"no permission to create files in {folder}"


def same_file(one: Path, other: Path) -> bool:
    """The same file by resolved path (symbolic links followed) or, where both exist, by device and inode."""
    return one.resolve() == other.resolve() or (one.exists() and other.exists() and os.path.samefile(one, other))


def write_output(path: Path, what: str, write: Callable[[Path], object]) -> bool:
    """Write one output, or say in one line that it could not be (False)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as error:
        # A full disk's error names no file: without this it would read as a store that stopped answering.
        echo(f"error: cannot write the {what} to {path}: {error.strerror or error}", file=sys.stderr)
        return False
    echo(f"{what} written to {path}")
    return True


def compared_memory(memory: Any, values: dict[str, Any]) -> Any:  # noqa: ANN401 - Memory, imported lazily
    """A second ``Memory`` over the same stores and embedder, with the compared settings applied."""
    from compassmem.library.memory import Memory
    from compassmem.library.runtime_settings import overrides
    from compassmem.retrieval.engine import RankingConfig

    config = memory.engine.config
    ranking = config.ranking.model_copy(update=overrides(RankingConfig, values))
    settings = memory.settings.model_copy(update=overrides(Settings, values))
    return Memory(settings, stores=memory.stores, embedder=memory.embedder,
                  engine_config=config.model_copy(update={"ranking": ranking}))


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.evaluation.report import chart_available
    from compassmem.library.runtime_settings import SettingValueError, UnknownSettingError

    try:
        budgets = parse_budgets(args.k)
        baselines = parse_baselines(args.baselines)
        compare = parse_compare(args.compare, over_http=args.url is not None)
        if api_key_option_given(args) and not args.url:
            raise EvalInputError("--api-key-file and --api-key go with --url (in process, the data directory needs "
                                 "no key)")
        api_key = resolve_api_key(args) if args.url else None
        missing_chart = chart_available() if args.chart else None
        if missing_chart:
            raise EvalInputError(missing_chart)
        check_outputs(args)
    except (EvalInputError, ApiKeyError, UnknownSettingError, SettingValueError) as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    run = evaluate(args, settings, budgets, baselines, compare, api_key)
    if run is None:
        return 2
    from compassmem.evaluation.report import draw_chart, json_report, markdown_report, text_report

    for line in text_report(run):
        echo(line)
    writes = [(args.chart, "chart", lambda path: draw_chart(run, path)),
              (args.report, "report", lambda path: path.write_text(markdown_report(run, args.chart), encoding="utf-8")),
              (args.json, "figures", lambda path: path.write_text(json.dumps(json_report(run), indent=2) + "\n",
                                                                  encoding="utf-8"))]
    written = all(write_output(path, what, write) for path, what, write in writes if path is not None)
    return 0 if written else 2


def evaluate(args: argparse.Namespace, settings: Settings, budgets: list[int], baselines: list[str],
             compare: dict[str, Any], api_key: str | None) -> Any:  # noqa: ANN401 - EvalRun, imported lazily
    """The run, or None after saying in one line why the questions cannot be asked."""
    from compassmem.evaluation.labelled_questions import Layout, QuestionFileError, check_evidence, load_questions
    from compassmem.evaluation.answerability import UNANSWERABLE_CATEGORY, measure_answerability
    from compassmem.evaluation.memory_recall import baseline_results, memory_corpus, memory_result
    from compassmem.evaluation.report import OVERALL, SYSTEM, EvalRun, setting_text
    from compassmem.embedding.embedders import make_embedder
    from compassmem.library.client import Client
    from compassmem.library.memory import Memory

    started = time.perf_counter()
    try:
        questions = load_questions(Path(args.path), tenant=args.tenant)
    except QuestionFileError as error:
        echo(f"error: {error}", file=sys.stderr)
        return None
    summary: dict[str, Any] = {"overall": OVERALL, "together": questions.layout is Layout.LOCOMO}
    source: Memory | Client = Client(args.url, api_key=api_key) if args.url else Memory(settings)
    with source:
        corpus = memory_corpus(source, questions.questions, questions.session_dates)  # NotFound: one line
        try:
            check_evidence(questions, corpus)
        except QuestionFileError as error:
            echo(f"error: {error}", file=sys.stderr)
            return None
        system, retriever = memory_result(SYSTEM, source, questions.questions, corpus, budgets, **summary)
        answerability = measure_answerability(
            source, retriever, questions.questions,
            UNANSWERABLE_CATEGORY if questions.layout is Layout.LOCOMO else args.unanswerable_category)
        compared = None
        if compare:
            with compared_memory(source, compare) as other:
                compared = memory_result(f"{SYSTEM} ({setting_text(compare)})", other, questions.questions, corpus,
                                         budgets, **summary)[0]
        embedder = source.embedder if isinstance(source, Memory) else make_embedder(settings)
        results = baseline_results(corpus, embedder, questions.questions, budgets, baselines, **summary) \
            if baselines else []
    where = f"the API at {args.url}" if args.url else f"in process, {settings.data_dir}"
    return EvalRun(questions=questions, budgets=budgets, memory=where, embedder=settings.embedder, turns=len(corpus),
                   system=system, baselines=results, compared=compared, compare_settings=compare,
                   answerability=answerability,
                   seconds=time.perf_counter() - started)
