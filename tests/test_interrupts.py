"""Ctrl-C through a real terminal (issue #59, item 3): ``import`` undoes what it wrote, ``ingest`` keeps what it wrote
and says how to go on, ``dev`` stops with its servers; each exits with one line, never a traceback.

Each command runs as the session leader of a pseudo-terminal, and the test types Ctrl-C (``\\x03``) into it: the
terminal driver sends SIGINT to its foreground process group, as a person's Ctrl-C does. The servers the command
started (embedded FalkorDB, the dev broker) run in sessions of their own, so they are stopped by the command, in
order, not killed by the terminal before an import's undo could use them."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dev_process import FAST_STREAM_ENV, free_port

from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.library.memory import Memory

CONVERSATIONS = 40
TURNS_EACH = 8


class Terminal:
    """A command run on a pseudo-terminal: what it printed there, Ctrl-C typed into it, its exit status."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.output = ""
        self.pid, self._fd = pty.fork()
        if self.pid == 0:  # the child: session leader with the terminal as its controlling one
            os.execve(sys.executable, [sys.executable, "-m", "compassmem.cli", *args], env)

    def read_until(self, seen: Callable[[str], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not seen(self.output):
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.2)) and self._exited():
                return seen(self.output)
        return True

    def ctrl_c(self) -> None:
        os.write(self._fd, b"\x03")

    def wait(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._read(0.1)
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                while self._read(0.05):
                    pass
                os.close(self._fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError(f"still running after {timeout_s} s:\n{self.output[-3000:]}")

    def _read(self, timeout_s: float) -> bool:
        ready, _, _ = select.select([self._fd], [], [], timeout_s)
        if not ready:
            return False
        try:
            chunk = os.read(self._fd, 65536)
        except OSError:  # the child closed the terminal
            return False
        self.output += chunk.decode("utf-8", "replace")
        return bool(chunk)

    def _exited(self) -> bool:
        return os.waitpid(self.pid, os.WNOHANG)[0] != 0 if self.pid else True


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _turns(conversations: int, each: int) -> list[Turn]:
    start = datetime(2024, 2, 1, 9, 0, tzinfo=UTC)
    topics = ["the garden shed roof", "a cello recital", "the Lisbon trip", "a new puppy", "the tax return"]
    return [Turn(conversation_id=f"chat-{c}", turn_id=f"t{n}", speaker="Ana" if n % 2 else "Ben",
                 text=f"About {topics[(c + n) % len(topics)]}: note {n} of chat {c}, heliotrope.",
                 timestamp=start + timedelta(days=c, minutes=n), session_id="1")
            for c in range(conversations) for n in range(each)]


def _env(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "COMPASSMEM_DATA_DIR": str(data_dir), "TERM": "dumb"}


def _held_conversations(data_dir: Path) -> set[str]:
    with Memory(Settings(_env_file=None, data_dir=data_dir)) as memory:  # type: ignore[call-arg]
        return {c.conversation_id for c in memory.conversations(limit=200).conversations}


@pytest.fixture(scope="module")
def export_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("interrupt-source")
    with Memory(Settings(_env_file=None, data_dir=folder / "data")) as memory:  # type: ignore[call-arg]
        memory.add(_turns(CONVERSATIONS, TURNS_EACH), warm=False)
        memory.export(folder / "memory.jsonl")
    return folder / "memory.jsonl"


@pytest.mark.parametrize("after", [1, 7, 20])
def test_ctrl_c_during_an_import_undoes_it_and_says_so(export_file: Path, tmp_path: Path, after: int) -> None:
    data_dir = tmp_path / "data"
    terminal = Terminal(["import", str(export_file)], _env(data_dir))
    assert terminal.read_until(lambda out: f"imported {after}/{CONVERSATIONS}" in out, 120), terminal.output[-3000:]
    children = _children(terminal.pid)
    terminal.ctrl_c()
    code = terminal.wait(120)
    assert "Traceback" not in terminal.output, terminal.output[-3000:]
    assert code == 130, terminal.output[-3000:]
    assert "interrupted: the import stopped in" in terminal.output
    assert "deleted again: the stores hold nothing of the file" in terminal.output
    assert not [pid for pid in children if _alive(pid)]  # its FalkorDB stopped with it
    assert _held_conversations(data_dir) == set()


def test_ctrl_c_during_an_ingest_keeps_what_it_wrote_and_the_same_command_finishes_it(tmp_path: Path) -> None:
    source = tmp_path / "turns.jsonl"
    source.write_text("".join(t.model_dump_json() + "\n" for t in _turns(12, 100)))
    data_dir = tmp_path / "data"
    terminal = Terminal(["ingest", str(source)], _env(data_dir))
    assert terminal.read_until(lambda out: "ingested 256/" in out, 180), terminal.output[-3000:]
    terminal.ctrl_c()
    code = terminal.wait(120)
    assert "Traceback" not in terminal.output, terminal.output[-3000:]
    assert code == 130, terminal.output[-3000:]
    assert "interrupted: the ingest stopped after" in terminal.output
    again = Terminal(["ingest", str(source)], _env(data_dir))
    assert again.wait(300) == 0, again.output[-3000:]
    assert _held_conversations(data_dir) == {f"chat-{c}" for c in range(12)}


def test_ctrl_c_stops_dev_and_its_servers_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {**_env(tmp_path / "data"), **FAST_STREAM_ENV, "COMPASSMEM_API_PORT": str(port),
           "COMPASSMEM_DEV_BROKER_PORT": "0"}
    terminal = Terminal(["dev"], env)
    import httpx

    deadline = time.monotonic() + 180
    while True:
        terminal.read_until(lambda out: False, 0.5)
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, terminal.output[-3000:]
    children = _children(terminal.pid)
    assert children, "dev started no server process"
    terminal.ctrl_c()
    code = terminal.wait(90)
    assert "Traceback" not in terminal.output, terminal.output[-3000:]
    assert code in (0, 130), terminal.output[-3000:]
    assert not [pid for pid in children if _alive(pid)]


