"""While `compassmem dev` runs it holds its data directory's stores. What a person runs beside it says where that
server is and reaches it (Issue #57 items 1, 2, 3 and 5); each before -> after is in the test's docstring. One
`dev` (its broker on any free port) serves the module; each command runs as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from dev_process import FAST_STREAM_ENV, free_port, serving_child
from test_library import MODEL_CACHE, SAMPLE, library_settings

from compassmem.cli.remote import BATCH_BYTES, turn_batches
from compassmem.core.models import Turn
from compassmem.sinks.factory import in_use_message
from compassmem.system.dev_server import FILE_NAME, DevServer, announced, running_dev

CLI = [sys.executable, "-m", "compassmem.cli"]
ROOT = Path(__file__).resolve().parent.parent
SESSION_4 = ROOT / "examples" / "sample_conversation_session4.jsonl"


@dataclass
class Dev:
    url: str
    pid: int
    data_dir: Path
    log: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    root = tmp_path_factory.mktemp("dev-server")
    data_dir = root / "data"
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update({**FAST_STREAM_ENV, "COMPASSMEM_DATA_DIR": str(data_dir), "COMPASSMEM_API_PORT": str(free_port()),
                "COMPASSMEM_DEV_BROKER_PORT": "0", "COMPASSMEM_EMBEDDER_CACHE_DIR": str(MODEL_CACHE)})
    url = f"http://127.0.0.1:{env['COMPASSMEM_API_PORT']}"
    with serving_child([*CLI, "dev"], root / "dev.log", f"{url}/healthz", 120, env) as process:
        deadline = time.monotonic() + 10
        while (server := running_dev(data_dir)) is None or server.api_url is None:
            assert time.monotonic() < deadline, "dev did not announce its API in the data directory"
            time.sleep(0.05)
        assert server == DevServer(pid=process.pid, broker=server.broker, api_url=url)
        yield Dev(url=url, pid=process.pid, data_dir=data_dir, log=root / "dev.log", env=env)
    # Stopped: the announcement went with it.
    assert not (data_dir / FILE_NAME).exists()


def _cli(dev: Dev, *argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], env={**dev.env, **env}, cwd=ROOT, capture_output=True, text=True,  # noqa: S603
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _one_error_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stderr)
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return line


@pytest.mark.parametrize("argv", [["ask", "priya-tom", "When did Priya adopt Biscuit?"], ["ingest", str(SAMPLE)]],
                         ids=["ask", "ingest"])
def test_a_command_on_the_held_data_directory_says_in_one_line_where_the_server_is(dev: Dev, argv: list[str]) -> None:
    """Before: "error: cannot open the qdrant-edge shard at … (is another process or store object using this
    directory?)". After: the pid and URL of the dev holding it, --url, compassmem.Client(url), another data dir."""
    line = _one_error_line(_cli(dev, *argv))
    for fragment in (f"COMPASSMEM_DATA_DIR={dev.data_dir}", f"`compassmem dev` (pid {dev.pid}) serving {dev.url}",
                     f"--url {dev.url}", f'compassmem.Client("{dev.url}")', "set another COMPASSMEM_DATA_DIR"):
        assert fragment in line, line


def test_memory_in_python_on_the_held_data_directory_says_the_same(dev: Dev) -> None:
    """Before: a traceback through the shard's own error, ending "(is another process …)". After: the same one
    line of guidance as the command line, without the chained error."""
    from compassmem.library.memory import Memory

    with pytest.raises(Exception) as raised:  # noqa: PT011 - the message is what this is about
        Memory(library_settings(dev.data_dir))
    assert str(raised.value) == in_use_message(dev.data_dir)
    assert f'compassmem.Client("{dev.url}")' in str(raised.value) and raised.value.__suppress_context__


def test_ask_and_ingest_reach_the_running_dev_with_url(dev: Dev) -> None:
    """Before: no way to reach a running dev from `ask` or `ingest`. After: --url, over POST /v1/turns and
    POST /v1/query, with the same output as in process."""
    sent = _cli(dev, "ingest", "--url", dev.url, str(SAMPLE))
    assert sent.returncode == 0 and "Traceback" not in sent.stderr, sent.stderr
    assert f"sent 24 turns to {dev.url}: 24 new" in sent.stdout
    question = {"conversation_id": "priya-tom", "question": "When did Priya adopt Biscuit?"}
    deadline = time.monotonic() + 90
    while "S1:7" not in httpx.post(f"{dev.url}/v1/query", json=question, timeout=30).json().get("turn_ids", []):
        assert time.monotonic() < deadline, "the posted turns did not become memory"
        time.sleep(0.5)
    asked = _cli(dev, "ask", "--url", dev.url, "priya-tom", "When did Priya adopt Biscuit?")
    assert asked.returncode == 0 and "Traceback" not in asked.stderr, asked.stderr
    assert "ranked turns: S1:7" in asked.stdout and "who:      Priya, Tom" in asked.stdout
    again = _cli(dev, "ingest", "--url", dev.url, str(SAMPLE))
    assert f"sent 24 turns to {dev.url}: 0 new, 24 memory had already" in again.stdout


def test_ingest_with_url_posts_batches_the_api_takes() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    small = [Turn(conversation_id="c", turn_id=str(i), speaker="A", text="hi", timestamp=at) for i in range(2500)]
    assert [len(batch) for batch in turn_batches(small)] == [1000, 1000, 500]
    large = [turn.model_copy(update={"text": "x" * 16_000}) for turn in small[:300]]
    batches = list(turn_batches(large))
    assert sum(len(batch) for batch in batches) == 300 and len(batches) > 1
    assert all(len(json.dumps([t.model_dump(mode="json") for t in batch])) <= BATCH_BYTES for batch in batches)


def test_produce_finds_the_broker_of_the_running_dev(dev: Dev) -> None:
    """Before: with its broker on port 0, dev printed no export line and `produce` waited 15 s, then failed on
    127.0.0.1:9092. After: dev prints the line on stderr, and `produce` takes the broker dev announced."""
    server = running_dev(dev.data_dir)
    assert server is not None and not server.broker.endswith(":9092")
    assert f"export COMPASSMEM_KAFKA_BOOTSTRAP={server.broker}" in dev.log.read_text()
    started = time.monotonic()
    produced = _cli(dev, "produce", str(SESSION_4), timeout=60)
    assert produced.returncode == 0 and "Traceback" not in produced.stderr, produced.stderr
    assert f"on {server.broker}" in produced.stdout and "produced 8 turns" in produced.stdout
    assert time.monotonic() - started < 15


def test_wait_ready_prints_the_url_or_says_what_it_waited_for(dev: Dev) -> None:
    """Before: `curl` right after `dev &` exited 7, silently. After: `compassmem wait-ready` returns once the API
    answers (the running dev's URL without --url), or exits 1 with one line."""
    ready = _cli(dev, "wait-ready", "--timeout", "30")
    assert (ready.returncode, ready.stdout) == (0, f"{dev.url}\n"), ready.stderr
    nobody = f"http://127.0.0.1:{free_port()}"
    line = _one_error_line(_cli(dev, "wait-ready", "--url", nobody, "--timeout", "1"), code=1)
    assert f"no compassmem API answered {nobody}/healthz within 1 s" in line


def test_a_second_dev_on_the_same_data_directory_names_the_process_holding_it(dev: Dev) -> None:
    """Before: a broker port or store error. After: the dev (pid, URL) that holds the directory."""
    line = _one_error_line(_cli(dev, "dev"))
    assert f"`compassmem dev` (pid {dev.pid}) serving {dev.url}" in line


def test_a_second_dev_on_a_port_in_use_names_the_port_and_its_setting(dev: Dev, tmp_path: Path) -> None:
    """Before: "a store stopped answering (OSError: [Errno 98] …) check that Qdrant and FalkorDB are running".
    After: the address that is taken and the setting to change."""
    api = _cli(dev, "dev", COMPASSMEM_DATA_DIR=str(tmp_path / "api"))
    line = _one_error_line(api)
    assert f"127.0.0.1:{dev.env['COMPASSMEM_API_PORT']}" in line and "COMPASSMEM_API_PORT" in line, line
    assert "store stopped answering" not in api.stderr
    server = running_dev(dev.data_dir)
    assert server is not None
    port = server.broker.rpartition(":")[2]
    line = _one_error_line(_cli(dev, "dev", COMPASSMEM_DATA_DIR=str(tmp_path / "broker"),
                                COMPASSMEM_DEV_BROKER_PORT=port))
    assert f"127.0.0.1:{port}" in line and "COMPASSMEM_DEV_BROKER_PORT" in line, line


def test_an_announcement_outlives_its_process_harmlessly(tmp_path: Path) -> None:
    """A dev killed with SIGKILL leaves its file: its pid is gone (or is another program by then), so nothing
    takes it for a running server."""
    for command in (["true"], ["sleep", "30"]):
        other = subprocess.Popen(command)  # noqa: S603
        try:
            if command == ["true"]:
                other.wait()
            (tmp_path / FILE_NAME).write_text(DevServer(pid=other.pid, broker="127.0.0.1:1").model_dump_json())
            assert running_dev(tmp_path) is None
            assert "another process" in in_use_message(tmp_path)
        finally:
            other.kill()
            other.wait()
    # A process named like compassmem stands in for a running dev.
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "compassmem"])  # noqa: S603
    try:
        with announced(tmp_path, DevServer(pid=stand_in.pid, broker="127.0.0.1:1")) as api_listening:
            assert running_dev(tmp_path) == DevServer(pid=stand_in.pid, broker="127.0.0.1:1")
            assert f"(pid {stand_in.pid}, still starting)" in in_use_message(tmp_path)
            api_listening("http://127.0.0.1:2")
            assert running_dev(tmp_path) == DevServer(pid=stand_in.pid, broker="127.0.0.1:1",
                                                      api_url="http://127.0.0.1:2")
        assert not (tmp_path / FILE_NAME).exists()
    finally:
        stand_in.kill()
        stand_in.wait()
