"""What compassmem prints (issue #57 item 9): used as a library it prints nothing into the program's output (its log
lines go to the standard library's loggers, which show them only when the program asks); the command line keeps
stdout for answers, summaries and tables and writes its log lines to stderr; Ctrl-C on ``status --watch`` ends it
in one line, exit 130, no traceback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import serving_handler

from compassmem.core.contracts.health import HealthTrend, MemoryHealth, TenantHealthTotals, WorkerHealth

REPOSITORY = Path(__file__).resolve().parent.parent
SAMPLE = REPOSITORY / "examples" / "sample_conversation.jsonl"
# The cache of the `embedder` fixture's settings: the model is exported once per checkout.
MODEL_CACHE = REPOSITORY / ".compassmem" / "models"
# A log line of either format the command line writes: console ('... [info     ] event ...') or JSON.
LOG_LINE = re.compile(r"\[(debug|info|warning|error|critical)\s*\]|^\{.*\"event\":")

PROGRAM = """
import json, sys
from pathlib import Path
from compassmem import Memory

turns = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
with Memory() as memory:
    memory.add(turns[:8])
    print("own output:", bool(memory.query("What did the client change?", conversation_id="priya-tom").turn_ids))
"""


def _env(data_dir: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("COMPASSMEM_")}
    return {**env, "COMPASSMEM_DATA_DIR": str(data_dir), "COMPASSMEM_EMBEDDER_CACHE_DIR": str(MODEL_CACHE)}


def _python(code: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, str(SAMPLE)], capture_output=True, text=True,
                          env=_env(data_dir), cwd=data_dir.parent, timeout=300, check=False)


def test_a_program_using_memory_prints_only_its_own_output(tmp_path: Path) -> None:
    done = _python(PROGRAM, tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["own output: True"], done.stdout
    assert done.stderr == ""


def test_its_lines_go_to_standard_logging_when_the_program_asks(tmp_path: Path) -> None:
    asking = "import logging\nlogging.basicConfig(level=logging.DEBUG, format='%(name)s %(levelname)s %(message)s')\n"
    done = _python(asking + PROGRAM, tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["own output: True"], done.stdout
    assert re.search(r"^compassmem\.embedding\.\S+ INFO event=embedder_loaded .*backend=onnx", done.stderr, re.M), \
        done.stderr
    assert re.search(r"^compassmem\.\S+ DEBUG event=", done.stderr, re.M), done.stderr


def _cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compassmem.cli", *args], capture_output=True, text=True,
                          env=_env(data_dir), timeout=300, check=False)


def test_the_command_line_writes_answers_to_stdout_and_log_lines_to_stderr(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ingested = _cli(data_dir, "ingest", str(SAMPLE))
    asked = _cli(data_dir, "ask", "priya-tom", "When did Priya adopt Biscuit?")
    for done in (ingested, asked):
        assert done.returncode == 0, done.stderr
        assert not [line for line in done.stdout.splitlines() if LOG_LINE.search(line)], done.stdout
        assert [line for line in done.stderr.splitlines() if LOG_LINE.search(line)], done.stderr
    assert "Q: When did Priya adopt Biscuit?" in asked.stdout and "ranked turns:" in asked.stdout


def _health() -> MemoryHealth:
    empty = HealthTrend(at=[], series={"events": [], "lag_records": [], "dead_letters": [], "confidence_drift": []})
    return MemoryHealth(
        tenant="default", sampled_at=datetime.now(UTC), sample_every_s=5.0, samples_kept=12, conversations_total=0,
        totals=TenantHealthTotals(conversations=0, events=0, turns=0, trend=empty), conversations=[],
        worker=WorkerHealth(in_process=False, note="no worker in this process", lag_records=None, lag_partitions={},
                            dead_letters=None, dead_letters_by_reason={}, relations_seen=None,
                            confidence_recent_mean=None, confidence_reference_mean=None, confidence_drift=None,
                            confidence_trend_per_1000=None, last_batch_at=None, warnings=[], trend=empty))


@pytest.fixture
def health_api() -> Iterator[str]:
    """An API that answers GET /v1/health/memory (what ``status`` reads) with an empty tenant's health."""
    body = _health().model_dump_json().encode()

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass

    with serving_handler(Answer) as url:
        yield url


def test_ctrl_c_on_status_watch_ends_it_in_one_line(health_api: str, tmp_path: Path) -> None:
    watching = subprocess.Popen([sys.executable, "-m", "compassmem.cli", "status", "--url", health_api,
                                 "--watch", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(tmp_path / "data"))
    try:
        assert watching.stdout is not None
        reports = 0
        deadline = time.monotonic() + 60
        while reports < 2 and time.monotonic() < deadline:  # watching: a second report came
            reports += watching.stdout.readline().startswith("memory health of tenant 'default'")
        assert reports == 2
        watching.send_signal(signal.SIGINT)
        out, err = watching.communicate(timeout=30)
    finally:
        watching.kill()
    assert watching.returncode == 130, err
    assert err.splitlines() == ["interrupted"], err
    assert "Traceback" not in out + err


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("WARNING", False), ("DEBUG", True)])
def test_kafka_clients_own_connection_errors_show_only_at_debug(level: str, shown: bool) -> None:
    """kafka-python logs a socket closed under a client being closed as ERROR with a traceback (Ctrl-C on
    ``compassmem dev`` printed one mid-shutdown): at the command line's usual levels it stays out of the terminal."""
    import logging

    from compassmem.core.logging_setup import configure_logging

    try:
        configure_logging(level)
        for name in ("kafka.net.transport", "kafka.cluster", "kafka.conn"):
            assert logging.getLogger(name).isEnabledFor(logging.ERROR) is shown
    finally:
        configure_logging("INFO")
