"""``compassmem eval FILE``: recall@k of a team's own labelled questions on its memory, in process and against a
running API, beside the baselines over the same memory's turns; the report, chart and JSON; a compared setting;
bad input refused in one line; and, where the LoCoMo development file is at hand, the same figures as
``benchmarks/locomo_recall.py`` on one of its conversations."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compassmem.cli.main import main
from compassmem.core.line_reading import MAX_LINE_CHARS

REPO_ROOT = Path(__file__).resolve().parent.parent
CONVERSATION = "ana-ben"
LINES = [
    ("1", "Ana", "Morning Ben! I finally booked the train tickets to Lisbon for the first week of June."),
    ("1", "Ben", "Nice, are you taking the night train through Madrid?"),
    ("1", "Ana", "No, the day train: I want to see the coast on the way."),
    ("1", "Ben", "My sister adopted a grey kitten called Pebble last weekend."),
    ("1", "Ana", "Cute! Does Pebble get along with her old dog?"),
    ("1", "Ben", "Mostly, the dog hides under the sofa when Pebble chases him."),
    ("1", "Ana", "I also started a pottery class on Thursday evenings."),
    ("2", "Ben", "How did the job interview at the bakery go?"),
    ("2", "Ana", "Really well, they offered me the head baker position starting in July."),
    ("2", "Ben", "Congratulations! Will you still go to Lisbon then?"),
    ("2", "Ana", "Yes, the trip is before the new job starts, so it fits."),
    ("2", "Ben", "I repaired the greenhouse roof after the storm broke two panes."),
    ("2", "Ana", "Did you use glass again or polycarbonate this time?"),
    ("2", "Ben", "Polycarbonate, it is lighter and will not shatter in the next storm."),
]
QUESTIONS = [
    {"question": "Where is Ana travelling by train?", "conversation_id": CONVERSATION, "evidence": ["D1:1", "D1:3"],
     "category": "travel"},
    {"question": "What is the name of the kitten Ben's sister adopted?", "conversation_id": CONVERSATION,
     "evidence": ["D1:4"], "category": "pets"},
    {"question": "When did Ben's sister adopt the kitten?", "conversation_id": CONVERSATION, "evidence": ["D1:4"],
     "category": "pets"},
    {"question": "What job was Ana offered?", "conversation_id": CONVERSATION, "evidence": ["D2:9"], "category": 3},
    {"question": "What did Ben use to repair the greenhouse roof?", "conversation_id": CONVERSATION,
     "evidence": ["D2:12", "D2:14"]},
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OTHER_TENANT = "acme"


def _turns() -> list[dict[str, Any]]:
    turns = []
    for index, (session, speaker, text) in enumerate(LINES, start=1):
        day = 3 if session == "1" else 17
        turns.append({"conversation_id": CONVERSATION, "turn_id": f"D{session}:{index}", "speaker": speaker,
                      "text": text, "timestamp": f"2024-05-{day:02d}T18:{index:02d}:00+00:00",
                      "session_id": session})
    return turns


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def _eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(code: int, err: str, *fragments: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def memory_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eval-memory")
    turns = _turns()
    # The same conversation again in a tenant of its own, for questions that name their tenant.
    turns += [{**turn, "tenant": OTHER_TENANT} for turn in turns]
    assert main(["--data-dir", str(root / "data"), "ingest", str(_jsonl(root / "turns.jsonl", turns))]) == 0
    return root / "data"


@pytest.fixture
def questions(tmp_path: Path) -> Path:
    return _jsonl(tmp_path / "questions.jsonl", QUESTIONS)


def _recall(figures: dict[str, Any]) -> dict[str, Any]:
    return {method: entry["recall"] for method, entry in figures["methods"].items()}


# --- in process --------------------------------------------------------------------------------------------------


def test_eval_in_process_prints_recall_and_writes_report_chart_and_json(
        memory_dir: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, chart, figures = tmp_path / "out" / "report.md", tmp_path / "out" / "recall.png", tmp_path / "r.json"
    code, out, err = _eval(capsys, str(questions), "--data-dir", str(memory_dir), "--report", str(report),
                           "--chart", str(chart), "--json", str(figures))
    assert code == 0, err
    assert "5 questions (JSONL, questions.jsonl) over 1 conversation(s), 14 turns" in out
    assert "recall by category:" in out and "recall by question shape:" in out
    header = next(line for line in out.splitlines() if line.startswith("recall@5/10/20 %"))
    assert header.split()[2:] == ["questions", "compassmem", "dense", "bm25", "rrf"]
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    assert {"travel", "pets", "3", "(none)", "all questions", "when"} <= set(rows)
    # The labels of each question were kept: 2 pets, one each of the others, five in all.
    assert rows["pets"].split()[1] == "2" and rows["all questions"].split()[2] == "5"

    written = json.loads(figures.read_text())
    assert written["layout"] == "jsonl" and written["budgets"] == [5, 10, 20] and written["turns"] == 14
    assert list(written["methods"]) == ["compassmem", "dense", "bm25", "rrf"]
    recall = _recall(written)
    assert recall["compassmem"]["(all)"]["20"] == 1.0  # 14 turns: every method finds everything at 20
    assert all(0.0 <= value <= 1.0 for method in recall.values() for group in method.values()
               for value in group.values())
    assert written["methods"]["compassmem"]["questions"]["(all)"] == 5
    assert "Where is Ana" not in figures.read_text()  # aggregates only
    # The printed cells are the JSON's shares in percent.
    cell = "/".join(f"{100 * recall['compassmem']['(all)'][k]:.1f}" for k in ("5", "10", "20"))
    assert rows["all questions"].split()[3] == cell

    assert chart.read_bytes().startswith(PNG_SIGNATURE)
    text = report.read_text()
    assert text.startswith("# compassmem recall on your questions")
    assert "## Recall by category" in text and "## Recall by question shape" in text
    assert f"| all questions | 5 | {cell} |" in text
    assert "![recall by category](recall.png)" in text


def test_compare_runs_the_questions_again_under_a_setting_and_shows_both_columns(
        memory_dir: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "r.json"
    code, out, err = _eval(capsys, str(questions), "--data-dir", str(memory_dir), "--compare", "ranking.fitted=false",
                           "--k", "1,5", "--baselines", "bm25", "--json", str(figures))
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("recall@1/5 %"))
    assert "compassmem (ranking.fitted=false)" in header and "difference (points)" in header
    assert header.index("compassmem (ranking.fitted=false)") < header.index("difference") < header.index("bm25")
    written = json.loads(figures.read_text())
    assert list(written["methods"]) == ["compassmem", "compassmem (ranking.fitted=false)", "bm25"]
    assert written["compare"]["settings"] == {"ranking.fitted": False}
    ours, theirs = (written["methods"][m]["recall"]["(all)"] for m in ("compassmem", "compassmem (ranking.fitted=false)"))
    assert written["compare"]["difference_points"]["(all)"] == pytest.approx(
        {k: 100 * (theirs[k] - ours[k]) for k in ("1", "5")})


def test_questions_name_their_tenant_or_take_the_tenant_option(
        memory_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "r.json"
    named = _jsonl(tmp_path / "named.jsonl", [{**q, "tenant": OTHER_TENANT} for q in QUESTIONS[:2]] + QUESTIONS[2:])
    code, out, err = _eval(capsys, str(named), "--data-dir", str(memory_dir), "--baselines", "bm25", "--json",
                           str(figures))
    assert code == 0, err
    assert "over 2 conversation(s), 28 turns" in out  # ana-ben of each tenant, each ranked on its own
    assert json.loads(figures.read_text())["methods"]["bm25"]["recall"]["(all)"]["20"] == 1.0
    code, out, err = _eval(capsys, str(_jsonl(tmp_path / "q.jsonl", QUESTIONS)), "--data-dir", str(memory_dir),
                           "--tenant", OTHER_TENANT, "--baselines", "none")
    assert code == 0, err
    assert "over 1 conversation(s), 14 turns" in out
    header = next(line for line in out.splitlines() if line.startswith("recall@5/10/20 %"))
    assert header.split()[2:] == ["questions", "compassmem"]


# --- against a running API ---------------------------------------------------------------------------------------


@pytest.fixture
def served(memory_dir: Path) -> Iterator[str]:
    """The memory of ``memory_dir`` behind a real HTTP server (uvicorn on a loopback port), tenant default keyed;
    the embedded stores belong to one holder, so it serves for one test and lets them go."""
    from compassmem.core.config import Settings
    from compassmem.library.memory import Memory
    from compassmem.monitoring.metrics import MemoryMetrics
    from compassmem.query_api.app import create_app
    from compassmem.query_api.dependencies import ApiServices
    from compassmem.query_api.server import BackgroundServer

    settings = Settings(_env_file=None, data_dir=memory_dir, api_keys={"default": "eval-secret-key-00001"})  # type: ignore[call-arg]
    with Memory(settings) as memory:
        services = ApiServices(memory=memory, settings=settings, metrics=MemoryMetrics(process_collectors=False))
        with BackgroundServer(create_app(services)) as server:
            yield server.url


@pytest.fixture
def in_process_figures(memory_dir: Path, questions: Path, tmp_path: Path) -> dict[str, Any]:
    """The figures in process (asked before ``served`` holds the stores)."""
    figures = tmp_path / "in-process.json"
    assert main(["eval", str(questions), "--data-dir", str(memory_dir), "--json", str(figures)]) == 0
    return json.loads(figures.read_text())


def test_eval_against_a_running_api_gives_the_in_process_figures(
        in_process_figures: dict[str, Any], served: str, questions: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    capsys.readouterr()
    figures = tmp_path / "r.json"
    key_file = tmp_path / "key"
    key_file.write_text("eval-secret-key-00001\n", encoding="utf-8")
    code, out, err = _eval(capsys, str(questions), "--url", served, "--api-key-file", str(key_file), "--json",
                           str(figures))
    assert code == 0, err
    assert f"memory: the API at {served}" in out and "all questions" in out
    written = json.loads(figures.read_text())
    # The turns read through the listings are the vector store's, and the answers POST /v1/query's: the same
    # figures, baselines included.
    assert written["turns"] == in_process_figures["turns"] == 14
    assert _recall(written) == _recall(in_process_figures)

    code, _, err = _eval(capsys, str(questions), "--url", served)
    _one_error_line(code, err, "401")
    monkeypatch.setenv("COMPASSMEM_API_KEY", "eval-secret-key-00001")
    code, _, err = _eval(capsys, str(questions), "--url", served, "--compare", "ranking.fitted=false")
    _one_error_line(code, err, "--compare needs the memory in process", "PUT /v1/config")


# --- bad input ---------------------------------------------------------------------------------------------------


def test_a_bad_jsonl_line_is_refused_naming_its_line_and_field(
        memory_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = [*QUESTIONS[:2], {**QUESTIONS[2], "evidence": []}, *QUESTIONS[3:]]
    path = _jsonl(tmp_path / "bad.jsonl", bad)
    code, out, err = _eval(capsys, str(path), "--data-dir", str(memory_dir))
    _one_error_line(code, err, f"{path}: line 3: field 'evidence'", "at least 1 item")
    assert out == ""
    typo = _jsonl(tmp_path / "typo.jsonl", [QUESTIONS[0], {**QUESTIONS[1], "evidense": ["D1:4"]}])
    _one_error_line(*_eval(capsys, str(typo), "--data-dir", str(memory_dir))[::2], "line 2: field 'evidense'")
    (tmp_path / "broken.jsonl").write_text(json.dumps(QUESTIONS[0]) + "\n\n{not json\n")
    _one_error_line(*_eval(capsys, str(tmp_path / "broken.jsonl"), "--data-dir", str(memory_dir))[::2],
                    "line 3: not valid JSON")
    # The question, conversation id and tenant by the rules POST /v1/query holds them to.
    blank = _jsonl(tmp_path / "blank.jsonl", [{**QUESTIONS[0], "question": "   "}])
    _one_error_line(*_eval(capsys, str(blank), "--data-dir", str(memory_dir))[::2],
                    "line 1: field 'question'", "must not be blank")
    spaced = _jsonl(tmp_path / "spaced.jsonl", [QUESTIONS[0], {**QUESTIONS[1], "conversation_id": "ana ben"}])
    _one_error_line(*_eval(capsys, str(spaced), "--data-dir", str(memory_dir))[::2],
                    "line 2: field 'conversation_id'", "U+0020")


def test_evidence_or_a_conversation_the_memory_lacks_is_refused(
        memory_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unknown_turn = _jsonl(tmp_path / "turn.jsonl", [QUESTIONS[0], {**QUESTIONS[1], "evidence": ["D1:4", "D9:9"]}])
    _one_error_line(*_eval(capsys, str(unknown_turn), "--data-dir", str(memory_dir))[::2],
                    "line 2: field 'evidence': turn 'D9:9' is not a turn of conversation 'ana-ben'")
    elsewhere = _jsonl(tmp_path / "other.jsonl", [{**QUESTIONS[0], "conversation_id": "nobody"}])
    _one_error_line(*_eval(capsys, str(elsewhere), "--data-dir", str(memory_dir))[::2],
                    "no memory for conversation 'nobody' of tenant 'default'")


@pytest.mark.parametrize(("options", "fragments"), [
    (["--k", "5,ten"], ["--k '5,ten'", "whole numbers"]),
    (["--k", "0"], ["each k must be 1 to 200"]),
    (["--compare", "ranking.nonsense=1"], ["unknown setting 'ranking.nonsense'", "ranking.fitted"]),
    (["--compare", "ranking.fitted=perhaps"], ["'ranking.fitted' must be true or false"]),
    (["--compare", "segmentation.shift_threshold=0.5"], ["changes how memory is built", "second memory"]),
    (["--compare", "ranking.fitted"], ["give KEY=VALUE"]),
    (["--baselines", "dense,bm52"], ["unknown baseline 'bm52'"]),
    (["--api-key-file", "key"], ["--api-key-file and --api-key go with --url"]),
    (["--api-key", "k"], ["--api-key-file and --api-key go with --url"]),
])
def test_bad_options_are_refused_in_one_line(questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             options: list[str], fragments: list[str]) -> None:
    code, out, err = _eval(capsys, str(questions), "--data-dir", str(tmp_path / "unused"), *options)
    _one_error_line(code, err, *fragments)
    assert err.strip().count("\n") == 0 and out == ""


# --- what it reads and writes ------------------------------------------------------------------------------------


def test_a_line_nested_too_deeply_is_refused_naming_the_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(QUESTIONS[0]) + '\n{"category": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    code, out, err = _eval(capsys, str(path), "--data-dir", str(tmp_path / "unused"))
    _one_error_line(code, err, f"{path}: line 2: not valid JSON: nested too deeply to parse")
    assert out == ""


def test_a_line_longer_than_an_import_line_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(QUESTIONS[0]) + '\n{"question": "' + "x" * (MAX_LINE_CHARS + 1) + '"}\n')
    code, out, err = _eval(capsys, str(path), "--data-dir", str(tmp_path / "unused"))
    _one_error_line(code, err, f"{path}: line 2: longer than {MAX_LINE_CHARS:,} characters")


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.mark.parametrize(("option", "name", "fragment"), [
    ("--chart", "recall.md", "--chart {path}: the chart is a PNG; name a .png file"),
    ("--report", "notes.txt/report.md", "--report {path}: {tmp}/notes.txt is not a directory"),
    ("--json", "folder", "--json {path}: a directory, not a file"),
    pytest.param("--report", "locked/new/report.md", "--report {path}: no permission to create files in {tmp}/locked",
                 marks=pytest.mark.skipif(_root(), reason="root may write in any directory")),
])
def test_every_output_is_checked_before_any_question_is_asked(
        memory_dir: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str,
        name: str, fragment: str) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a directory\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "locked").mkdir(mode=0o500)
    path = tmp_path / name
    code, out, err = _eval(capsys, str(questions), "--data-dir", str(memory_dir), option, str(path))
    _one_error_line(code, err, fragment.format(path=path, tmp=tmp_path))
    assert out == ""  # nothing was asked


def test_an_output_over_the_questions_file_or_another_output_is_refused(
        questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = questions.read_bytes()
    os.link(questions, tmp_path / "hard-link.md")
    (tmp_path / "symbolic-link.md").symlink_to(questions)
    unused = str(tmp_path / "unused")
    for options, fragment in (
            (["--report", str(questions)], f"--report {questions}: the same file as the questions file"),
            (["--json", str(tmp_path / "hard-link.md")], "the same file as the questions file"),
            (["--report", str(tmp_path / "symbolic-link.md")], "the same file as the questions file"),
            (["--report", str(tmp_path / "out.md"), "--json", str(tmp_path / "sub" / ".." / "out.md")],
             f"--json {tmp_path / 'sub' / '..' / 'out.md'}: the same file as --report"),
            (["--report", str(tmp_path / "r.md"), "--chart", str(tmp_path / "r.png"), "--json",
              str(tmp_path / "r.png")], f"--json {tmp_path / 'r.png'}: the same file as --chart")):
        _one_error_line(*_eval(capsys, str(questions), "--data-dir", unused, *options)[::2], fragment)
    assert questions.read_bytes() == original


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full, whose every write fails as on a full disk")
def test_a_write_that_fails_is_a_write_error_naming_the_file(
        memory_dir: Path, questions: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _eval(capsys, str(questions), "--data-dir", str(memory_dir), "--baselines", "none", "--json",
                           "/dev/full")
    line = _one_error_line(code, err, "cannot write the figures to /dev/full: No space left on device")
    assert "store" not in line
    assert "all questions" in out  # the figures were printed before


def test_the_report_and_chart_show_what_the_user_wrote_without_acting_on_it(
        memory_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    category = "pets\n# Injected | heading\n<script>alert(1)</script> & `code` $\\frac$"
    path = _jsonl(tmp_path / "q_`<i>`.jsonl", [{**QUESTIONS[1], "category": category}, QUESTIONS[0]])
    report, chart = tmp_path / "report.md", tmp_path / "recall chart.png"
    code, _, err = _eval(capsys, str(path), "--data-dir", str(memory_dir), "--baselines", "bm25", "--report",
                         str(report), "--chart", str(chart))
    assert code == 0, err
    assert chart.read_bytes().startswith(PNG_SIGNATURE)  # the '$...$' is not read as TeX
    text = report.read_text()
    assert "<script>" not in text and "<i>" not in text and "\n# Injected" not in text
    # One line, one cell: the pipe, the tag, the ampersand and the backticks shown as written.
    assert ("| pets # Injected \\| heading &lt;script&gt;alert(1)&lt;/script&gt; &amp; \\`code\\` $\\\\frac$ | 1 |"
            in text)
    assert "/q\\_\\`&lt;i&gt;\\`.jsonl (jsonl)" in text
    assert "![recall by category](recall%20chart.png)" in text
    for table in ("## Recall by category", "## Recall by question shape"):
        rows = text.split(table)[1].split("\n\n")[1].splitlines()
        cells = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(cells) == 1 and all(row.startswith("|") and row.endswith("|") for row in rows), rows


# --- the same figures as the LoCoMo benchmark --------------------------------------------------------------------

LOCOMO_VARIABLE = "LOCOMO_DATA"  # the benchmarks' (benchmarks/common.py)
LOCOMO_DEV = REPO_ROOT.parent / "shared" / "data" / "locomo_dev.json"
# The smallest development conversation (369 turns, 105 questions): both runs take well under two minutes.
LOCOMO_CONVERSATION = "conv-30"


def _locomo_dev() -> Path | None:
    for candidate in (os.environ.get(LOCOMO_VARIABLE), LOCOMO_DEV):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@pytest.mark.slow
@pytest.mark.skipif(_locomo_dev() is None, reason=f"LoCoMo development data absent: neither {LOCOMO_VARIABLE} nor "
                                                  f"{LOCOMO_DEV} names a file (it is never copied into the repository)")
def test_eval_prints_the_locomo_benchmarks_figures_on_a_memory_built_from_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.locomo_recall import main as benchmark

    source = _locomo_dev()
    assert source is not None
    samples = json.loads(source.read_text(encoding="utf-8"))
    data = tmp_path / "one_conversation.json"
    data.write_text(json.dumps([s for s in samples if s["sample_id"] == LOCOMO_CONVERSATION]), encoding="utf-8")
    memory = tmp_path / "memory"
    assert main(["--data-dir", str(memory), "ingest", str(data)]) == 0
    ours = tmp_path / "eval.json"
    code, out, err = _eval(capsys, str(data), "--data-dir", str(memory), "--json", str(ours))
    assert code == 0, err
    theirs = tmp_path / "benchmark.json"
    assert benchmark(["--data", str(data), "--out", str(theirs)]) == 0
    printed = capsys.readouterr().out

    eval_figures, benchmark_figures = _recall(json.loads(ours.read_text())), _recall(json.loads(theirs.read_text()))
    for method in ("compassmem", "dense", "bm25", "rrf"):
        for group, recall in benchmark_figures[method].items():
            assert eval_figures[method][group] == recall, (method, group)
    # And as printed: the benchmark's cell of each method for 1-4 together is the eval's.
    rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines()}
    together = rows["1-4 together"]
    for index, method in enumerate(("compassmem", "dense", "bm25", "rrf")):
        benchmark_row = next(line.split() for line in printed.splitlines() if line.startswith(method + " "))
        assert together[3 + index] in benchmark_row, (method, together, benchmark_row)
