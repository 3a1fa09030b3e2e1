"""The API key of the commands that ask a running API (``compassmem eval --url``, ``compassmem status``;
``compassmem/cli/api_key.py``): from ``--api-key-file`` or ``COMPASSMEM_API_KEY``, so that it never shows in the
process list, where every user of the machine reads it; a file that cannot give one stops the command in one line
(exit 2); ``--api-key KEY`` still works, with a warning. Each verb runs as a real process against a real HTTP server
whose tenant has a key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compassmem.cli.main import main
from compassmem.core.config import API_KEY_VARIABLE, Settings
from compassmem.core.models import Turn
from compassmem.library.memory import Memory
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore

TENANT = "cli-keyed"
KEY = f"{TENANT}.secret-of-the-cli-key-test"
SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
QUESTION = {"question": "What did the client change about the Atlas launch?", "conversation_id": "priya-tom",
            "evidence": ["S1:1", "S1:3"], "tenant": TENANT}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any) -> Iterator[str]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("cli-key-qdrant") / "qdrant", embedder.dim)
    stores = Stores(vectors=vectors, graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    settings = Settings(_env_file=None, api_keys=[KEY])  # type: ignore[call-arg]
    try:
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            writer.add([Turn(tenant=TENANT, **json.loads(line)) for line in SAMPLE.read_text().splitlines()
                        if line.strip()])
        services = build_services(settings, stores, embedder, MemoryMetrics(process_collectors=False))
        with BackgroundServer(create_app(services)) as server:
            yield server.url
    finally:
        stores.close()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_text(f"  {KEY}  \nonly the first line is the key\n", encoding="utf-8")
    return path


def _run(args: list[str], tmp_path: Path, stdin: str | None = None,
         **env: str) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Run ``compassmem ARGS`` and return its command line as any user of the machine reads it while it runs
    (``ps``, ``/proc/<pid>/cmdline``), and how it ended."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("COMPASSMEM_")}
    environment.update(COMPASSMEM_DATA_DIR=str(tmp_path / "data"), **env)
    process = subprocess.Popen([sys.executable, "-m", "compassmem.cli", *args], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    argv: list[str] = []
    deadline = time.monotonic() + 60
    # Until the exec: before it, /proc shows the forking test's own command line.
    while "compassmem.cli" not in argv and process.poll() is None and time.monotonic() < deadline:
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode().split("\0")
        time.sleep(0.002)
    out, err = process.communicate(stdin, timeout=300)
    assert "compassmem.cli" in argv, ("the command line was never seen", argv, err)
    return argv, subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _status(served: str, *options: str) -> list[str]:
    return ["status", "--url", served, "--tenant", TENANT, "--json", *options]


def test_status_takes_the_key_from_a_file_or_the_environment_and_never_shows_it(
        served: str, key_file: Path, tmp_path: Path) -> None:
    for options, stdin, env in [([], None, {API_KEY_VARIABLE: KEY}),
                                (["--api-key-file", str(key_file)], None, {}),
                                (["--api-key-file", "-"], f"{KEY}\n", {}),
                                # The file wins over the environment.
                                (["--api-key-file", str(key_file)], None,
                                 {API_KEY_VARIABLE: f"{TENANT}.not-the-key-at-all"})]:
        argv, done = _run(_status(served, *options), tmp_path, stdin, **env)
        assert done.returncode == 0, (options, done.stderr)
        assert json.loads(done.stdout)["tenant"] == TENANT
        assert all(KEY not in arg for arg in argv), argv
        assert KEY not in done.stderr and "warning" not in done.stderr
    # What the check above would have caught: a key on the command line is there for everyone to read.
    argv, done = _run(_status(served, "--api-key", KEY), tmp_path)
    assert done.returncode == 0, done.stderr
    assert KEY in argv
    assert done.stderr.splitlines() == [
        "warning: --api-key shows the key to every user of this machine in the process list (ps); put it in a file "
        f"and pass --api-key-file FILE, or set {API_KEY_VARIABLE}"]


def test_eval_over_http_takes_the_key_from_the_environment_and_never_shows_it(served: str, tmp_path: Path) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps(QUESTION) + "\n", encoding="utf-8")
    args = ["eval", str(questions), "--url", served, "--baselines", "none"]
    argv, done = _run(args, tmp_path, **{API_KEY_VARIABLE: KEY})
    assert done.returncode == 0, done.stderr
    assert f"memory: the API at {served}" in done.stdout
    assert all(KEY not in arg for arg in argv), argv
    _, done = _run(args, tmp_path)
    assert done.returncode == 2 and "401" in done.stderr


@pytest.mark.parametrize("verb", ["status", "eval"])
def test_a_key_file_that_gives_no_key_stops_the_command_in_one_line(
        verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(API_KEY_VARIABLE, KEY)  # a file named is read, never passed over for the environment
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps(QUESTION) + "\n", encoding="utf-8")
    # No server: each of these stops before any request.
    before = {"status": ["status", "--url", "http://127.0.0.1:9"],
              "eval": ["eval", str(questions), "--url", "http://127.0.0.1:9"]}[verb]
    (tmp_path / "empty").write_text("", encoding="utf-8")
    (tmp_path / "blank-first-line").write_text("\n" + KEY + "\n", encoding="utf-8")
    for name, reason in [("missing", "No such file or directory"), ("empty", "the first line is empty"),
                         ("blank-first-line", "the first line is empty")]:
        assert main([*before, "--api-key-file", str(tmp_path / name)]) == 2
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [f"error: --api-key-file {tmp_path / name}: {reason}"
                                             + ("; it must hold the API key" if "empty" in reason else "")]
        assert captured.out == ""
    with pytest.raises(SystemExit) as stopped:
        main([*before, "--api-key-file", str(tmp_path / "empty"), "--api-key", KEY])
    assert stopped.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
