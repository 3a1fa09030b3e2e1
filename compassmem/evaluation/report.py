"""What ``compassmem eval`` shows of a run: the tables on stdout, a Markdown report, a PNG bar chart and JSON.

A run is compassmem's recall (and, with a compared setting, compassmem's again under it) beside the baselines',
each method's recall@k per category (with an ``all`` group of every question) and per question shape. Recall is
given in percent in the tables and the report, as a share (0 to 1) in the JSON, as the benchmarks write theirs.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from compassmem.evaluation.answerability import Answerability, answerability_lines
from compassmem.evaluation.harness import MethodResult
from compassmem.evaluation.labelled_questions import Layout, QuestionSet, category_names
from compassmem.evaluation.question_shapes import recall_by_shape
from compassmem.evaluation.recall import CategoryRecall

# The group of every question (in parentheses: a team's own category cannot be named so by chance).
OVERALL = "(all)"
SYSTEM = "compassmem"


def setting_text(values: Mapping[str, Any]) -> str:
    """``key=value, ...`` as a command line gives them (true/false in lower case)."""
    return ", ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}"
                     for key, value in values.items())


@dataclass
class EvalRun:
    """One ``compassmem eval``: the questions, where the memory was, and every method's result on them."""

    questions: QuestionSet
    budgets: list[int]
    memory: str
    embedder: str
    turns: int
    system: MethodResult
    baselines: list[MethodResult]
    compared: MethodResult | None = None
    compare_settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    answerability: Answerability | None = None

    @property
    def methods(self) -> list[MethodResult]:
        return [self.system, *([self.compared] if self.compared else []), *self.baselines]

    def by_category(self, method: MethodResult) -> dict[str, CategoryRecall]:
        return method.summary.categories

    def by_shape(self, method: MethodResult) -> dict[str, CategoryRecall]:
        return recall_by_shape(self.questions.questions, method)

    def group_name(self, group: str) -> str:
        if group == OVERALL:
            return "all questions"
        return category_names(self.questions.questions, self.questions.layout).get(group, group)


def _cell(entry: CategoryRecall | None, budgets: Sequence[int]) -> str:
    return "-" if entry is None else "/".join(f"{100 * entry.recall[b]:.1f}" for b in budgets)


def _difference(ours: CategoryRecall | None, theirs: CategoryRecall | None, budgets: Sequence[int]) -> str:
    if ours is None or theirs is None:
        return "-"
    return "/".join(f"{100 * (theirs.recall[b] - ours.recall[b]):+.1f}" for b in budgets)


def table(run: EvalRun, groups: Mapping[str, Mapping[str, CategoryRecall]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of one breakdown: a row a group (its questions, then each method's recall@k cell, and
    after the compared setting's column, its difference from compassmem in points). ``groups``: method -> the
    method's groups."""
    compared = run.compared.method if run.compared else None
    headers = [f"recall@{'/'.join(map(str, run.budgets))} %", "questions", SYSTEM]
    if compared:
        headers += [compared, "difference (points)"]
    headers += [result.method for result in run.baselines]
    rows = []
    for group, entry in groups[SYSTEM].items():
        row = [run.group_name(group), str(entry.questions), _cell(entry, run.budgets)]
        if compared:
            theirs = groups[compared].get(group)
            row += [_cell(theirs, run.budgets), _difference(entry, theirs, run.budgets)]
        row += [_cell(groups[result.method].get(group), run.budgets) for result in run.baselines]
        rows.append(row)
    return headers, rows


def breakdowns(run: EvalRun) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    """(title, table) of each breakdown: by category, then by question shape."""
    categories = {result.method: run.by_category(result) for result in run.methods}
    shapes = {result.method: run.by_shape(result) for result in run.methods}
    return [("by category", table(run, categories)), ("by question shape", table(run, shapes))]


def _aligned(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for number, line in enumerate([headers, *rows]):
        lines.append("  ".join(text.ljust(widths[0]) if i == 0 else text.rjust(widths[i])
                               for i, text in enumerate(line)).rstrip())
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def headline(run: EvalRun) -> str:
    layout = "LoCoMo" if run.questions.layout is Layout.LOCOMO else "JSONL"
    return (f"compassmem eval: {len(run.questions.questions)} questions ({layout}, {run.questions.path.name}) over "
            f"{run.questions.conversations} conversation(s), {run.turns} turns; memory: {run.memory}; "
            f"baselines' embedder: {run.embedder}")


def text_report(run: EvalRun) -> list[str]:
    """The lines printed on stdout."""
    lines = [headline(run)]
    if run.compared:
        lines.append(f"compared setting: {run.compared.method} (same memory, same questions)")
    for title, (headers, rows) in breakdowns(run):
        lines += ["", f"recall {title}:", *_aligned(headers, rows)]
    if run.answerability is not None:
        lines += answerability_lines(run.answerability)
    if run.questions.report is not None and run.questions.report.skipped:
        lines += ["", f"{run.questions.report.skipped} question(s) of the file skipped: no evidence turn left after "
                      "normalising its ids"]
    return lines


# What Markdown acts on inside a line: a backslash escape, code, emphasis, links, table cells, strikethrough.
_MARKDOWN_SIGNS = re.compile(r"([\\`*_\[\]|~])")


def markdown_text(text: str) -> str:
    """Text from the user (a category, a path, a URL) as Markdown that shows it as written: on one line (a newline
    would end the table row), HTML escaped (no tag or entity acts), and each Markdown sign backslash-escaped."""
    return _MARKDOWN_SIGNS.sub(r"\\\1", html.escape(" ".join(text.splitlines()), quote=False))


def _markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(markdown_text(cell) for cell in cells) + " |"

    return [line(headers), "|" + "|".join("---" for _ in headers) + "|", *(line(row) for row in rows)]


def markdown_report(run: EvalRun, chart: Path | None = None) -> str:
    """The report as Markdown: what was measured, the tables, and how to read them."""
    budgets = "/".join(map(str, run.budgets))
    lines = ["# compassmem recall on your questions", "",
             f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {run.seconds:.1f} s.", "",
             f"- questions: {markdown_text(str(run.questions.path))} ({run.questions.layout.value}), "
             f"{len(run.questions.questions)} questions over {run.questions.conversations} conversation(s), "
             f"{run.turns} turns",
             f"- memory: {markdown_text(run.memory)}",
             f"- recall@{budgets}: the share of a question's evidence turns among the first k turns each method "
             "returns, averaged over the questions of a row, in percent",
             f"- baselines over the same memory's turns: {', '.join(r.method for r in run.baselines) or 'none'} "
             f"(embedder {markdown_text(run.embedder)})"]
    if run.compared:
        lines.append(f"- compared: compassmem with {markdown_text(setting_text(run.compare_settings))} on the same "
                     "memory; the difference column is that column minus compassmem's, in points")
    for title, (headers, rows) in breakdowns(run):
        lines += ["", f"## Recall {title}", "", *_markdown_table(headers, rows)]
    if chart is not None:
        lines += ["", f"![recall by category]({quote(chart.name)})"]
    if run.answerability is not None:
        lines += ["", "## Says when it knows nothing", "",
                  *(f"- {markdown_text(line.strip())}" for line in answerability_lines(run.answerability)[2:])]
    lines += ["", "## Reading it", "",
              "Each cell is recall@" + budgets + ". The `all questions` row is the mean over every question. "
              "A row with few questions moves by whole points when one question changes: read it with its count. "
              "compassmem ahead of the baselines in a row means its events, graph and ranking find evidence that "
              "plain search over the same turns misses; behind them, that the questions of that row are where to "
              "look (the question shapes name the kind of question). See docs/evaluate.md."]
    return "\n".join(lines) + "\n"


def json_report(run: EvalRun) -> dict[str, Any]:
    """The figures as JSON (aggregates only, never question text): the ``methods`` block has the layout of the
    benchmarks' results (``benchmarks/locomo_baselines.py``), plus each method's recall by question shape."""
    def recall(groups: Mapping[str, CategoryRecall]) -> dict[str, dict[str, float]]:
        return {group: {str(b): value for b, value in entry.recall.items()} for group, entry in groups.items()}

    output: dict[str, Any] = {
        "benchmark": "compassmem eval: evidence recall@k",
        "questions_file": str(run.questions.path),
        "layout": run.questions.layout.value,
        "questions": len(run.questions.questions),
        "conversations": run.questions.conversations,
        "turns": run.turns,
        "memory": run.memory,
        "embedder": run.embedder,
        "budgets": run.budgets,
        "methods": {
            result.method: {
                "recall": recall(run.by_category(result)),
                "questions": {group: entry.questions for group, entry in run.by_category(result).items()},
                "by_shape": {shape: {"questions": entry.questions, "recall": {str(b): v for b, v in entry.recall.items()}}
                             for shape, entry in run.by_shape(result).items()},
                "mean_context_tokens": None if result.mean_context_tokens is None
                else {str(b): v for b, v in result.mean_context_tokens.items()},
                "seconds": round(result.seconds, 3),
            }
            for result in run.methods
        },
        "seconds_total": round(run.seconds, 2),
    }
    if run.answerability is not None:
        output["answerability"] = run.answerability.model_dump()
    if run.compared:
        ours, theirs = run.by_category(run.system), run.by_category(run.compared)
        output["compare"] = {
            "settings": run.compare_settings, "method": run.compared.method,
            "difference_points": {group: {str(b): 100 * (theirs[group].recall[b] - entry.recall[b])
                                          for b in run.budgets}
                                  for group, entry in ours.items() if group in theirs}}
    if run.questions.report is not None:
        output["evidence_normalisation"] = run.questions.report.model_dump(mode="json")
    return output


def chart_available() -> str | None:
    """None when the chart can be drawn, else why not (matplotlib is the optional extra ``bench``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--chart needs matplotlib: pip install 'compassmem[bench]' (or leave --chart out)"
    return None


def draw_chart(run: EvalRun, path: Path) -> None:
    """A PNG of grouped bars: one panel per k, a group of bars per category (and all questions), a bar per method."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    methods = run.methods
    groups = list(run.by_category(run.system))
    width = 0.8 / len(methods)
    size = (min(14.0, max(7.0, 0.35 * len(groups) * len(methods) + 2)), 2.6 * len(run.budgets) + 1.0)
    figure, axes = plt.subplots(len(run.budgets), 1, figsize=size, squeeze=False)
    # parse_math off: a '$' in a file name or a category would be read as TeX, and bad TeX fails the drawing.
    figure.suptitle(f"recall@k by category: {len(run.questions.questions)} questions, {run.questions.path.name}",
                    parse_math=False)
    for axis, budget in zip(axes[:, 0], run.budgets, strict=True):
        for index, result in enumerate(methods):
            values = [100 * (entry.recall[budget] if (entry := run.by_category(result).get(group)) else 0.0)
                      for group in groups]
            axis.bar([g + (index - (len(methods) - 1) / 2) * width for g in range(len(groups))], values, width,
                     label=result.method)
        axis.set_ylabel(f"recall@{budget} %")
        axis.set_ylim(0, 100)
        axis.set_xticks(range(len(groups)), [run.group_name(group) for group in groups], fontsize=8, parse_math=False)
        axis.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=8, ncols=min(len(methods), 4), loc="upper center",
                  bbox_to_anchor=(0.5, 0.965))
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.55 / size[1] - (0.2 if len(methods) <= 4 else 0.35) / size[1]))
    figure.savefig(path, dpi=110)
    plt.close(figure)
