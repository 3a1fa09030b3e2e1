"""What compassmem prints at a terminal never carries a character the terminal would act on: an escape sequence in a
turn's words or an LLM's answer could clear the screen, rewrite earlier lines or change the title. Every command
prints through ``compassmem.core.terminal.echo``, which shows such characters as escapes and keeps tabs and newlines."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import pytest

from compassmem.cli.main import print_answer
from compassmem.core.contracts.query import EvidenceItem, QueryResponse, TurnOut
from compassmem.core.terminal import terminal_safe

PACKAGE = Path(__file__).resolve().parent.parent / "compassmem"


@pytest.mark.parametrize(("text", "shown"), [
    ("clear\x1b[2Jscreen", "clear\\x1b[2Jscreen"),
    ("nul\x00 bell\x07 del\x7f", "nul\\x00 bell\\x07 del\\x7f"),
    ("over\rwritten", "over\\x0dwritten"),
    ("c1 csi\x9b31m", "c1 csi\\x9b31m"),
    ("right-to-left \u202etxt.exe", "right-to-left \\u202etxt.exe"),
    ("lone \ud800", "lone \\ud800"),
    ("tabs\tand\nnewlines, caf\u00e9, \u4e2d\u6587", "tabs\tand\nnewlines, caf\u00e9, \u4e2d\u6587"),
])
def test_terminal_safe_shows_what_a_terminal_would_act_on(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown


def test_ask_prints_an_answer_and_turns_with_escape_sequences_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    said = TurnOut(conversation_id="c1", turn_id="t1", speaker="Ann\x1b]0;owned\x07",
                   text="first line\nsecond \x1b[31mred\x1b[0m", timestamp=datetime(2024, 3, 4, tzinfo=UTC))
    response = QueryResponse(turn_ids=["t1"], evidence=[EvidenceItem(
        conversation_id="c1", event_id="e" * 32, score=1.0, subgoal="q", turns=[said], path=[], time_anchors=[])],
        subgoals=["q"], answer="Because \x1b[2Jof the storm.", timings_ms={"total": 1.0})
    print_answer("Why?", response, 5)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "A: Because \\x1b[2Jof the storm." in out
    assert "Ann\\x1b]0;owned\\x07: first line\nsecond \\x1b[31mred\\x1b[0m" in out


def test_no_command_line_module_prints_around_echo() -> None:
    """The one place: no module that serves a command calls print() itself."""
    modules = [*PACKAGE.glob("cli/*.py"), PACKAGE / "query_api" / "server.py", PACKAGE / "streams" / "runner.py"]
    printing = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in modules
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]
    assert printing == []
