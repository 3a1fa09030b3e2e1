"""The pages a user reads to choose and understand: `explain` in plain words (docs/explain.md), which optional models
to turn on (docs/which-settings.md, its figures those of docs/benchmarks.md) and the concepts without the code's
internal constants (docs/concepts.md)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import yaml

from compassmem.core.contracts.query import Channel
from compassmem.retrieval.ranking_model import BASE_FEATURES

DOCS = Path(__file__).resolve().parent.parent / "docs"
MKDOCS = DOCS.parent / "mkdocs.yml"
# A fraction written bare is a threshold or a weight; a measurement carries its unit (%, s, ms).
BARE_FRACTION = re.compile(r"(?<![\d.])0\.\d+(?!\d|\s?(?:%|s\b|ms\b|MiB))")


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def test_both_pages_are_in_the_site_navigation() -> None:
    # mkdocs.yml's own tags (!!python/name ...) are not needed to read the nav.
    nav = yaml.load(MKDOCS.read_text(), Loader=yaml.BaseLoader)["nav"]  # noqa: S506 - BaseLoader builds no objects
    assert {"explain.md", "which-settings.md"} <= set(_nav_pages(nav))


def test_explain_says_what_every_channel_and_feature_means() -> None:
    page = (DOCS / "explain.md").read_text()
    missing = [f"`{name}`" for name in (*typing.get_args(Channel), *BASE_FEATURES) if f"`{name}`" not in page]
    assert not missing, f"docs/explain.md does not say what these mean: {missing}"
    assert "`NAME*long`" in page and "score_rank" in page and "found_with_event" in page


def test_which_settings_gives_the_benchmarks_figures_of_each_option() -> None:
    page = (DOCS / "which-settings.md").read_text()
    for setting in ("COMPASSMEM_EMBEDDING_MODEL=dialogue-minilm", "COMPASSMEM_EMBEDDING_MODEL=dialogue-minilm-mix",
                    "COMPASSMEM_RERANKER=relevance-minilm", "COMPASSMEM_LLM_URL"):
        assert setting in page
    # The model_costs table of docs/benchmarks.md: each row's recall, query times and ingest rate.
    benchmarks = (DOCS / "benchmarks.md").read_text()
    rows = re.findall(r"^\| (bundled all-MiniLM-L6-v2|dialogue-minilm|dialogue-minilm-mix) \| "
                      r"(none|relevance-minilm) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", benchmarks,
                      flags=re.MULTILINE)
    assert len(rows) == 6
    for _, _, turns, p50, p99, recall in rows:
        assert f"| {recall} % | {p50} / {p99} ms | {turns} |" in page, (recall, p50, p99, turns)


def test_concepts_says_what_thresholds_mean_not_their_values() -> None:
    page = (DOCS / "concepts.md").read_text()
    assert not BARE_FRACTION.findall(page), [line for line in page.splitlines() if BARE_FRACTION.search(line)]
    for constant in ("cosine >=", "Jaccard >", "k = round", "256 tokens", "300 tokens", "30 minutes"):
        assert constant not in page
