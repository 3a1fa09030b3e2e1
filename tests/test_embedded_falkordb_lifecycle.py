"""The embedded FalkorDB's lifetime across processes: it dies with a SIGKILLed owner, a server left behind by a
dead owner is stopped at the next start (data kept), one whose owner lives is refused, and nothing that is not
a redis-server of the data directory is ever signalled.

Real processes throughout: a child Python process owns the server, the test SIGKILLs that child. Tests signal
only processes they started themselves (the child, or the redis-server that child started), by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compassmem.sinks.falkordb_server import OWNER_NAME, PID_NAME, EmbeddedFalkorDB, FalkorDBStartupError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc: Linux")

# argv: data_dir, mode. Modes: "main" starts the server on the main thread; "thread" on a short-lived thread that
# has exited before the pids are printed (PDEATHSIG must not fire with it); "untied" as a compassmem without
# PDEATHSIG did (the way stale servers came about). Writes one graph node, prints the pids, waits for stdin EOF.
_OWNER_SCRIPT = """
import json, sys, threading, time
from pathlib import Path
import compassmem.system.child_process as child_process
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB

data_dir, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "untied":
    child_process._prctl = None
server = EmbeddedFalkorDB(data_dir)
if mode == "thread":
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
    time.sleep(0.5)
else:
    server.start()
server.client().select_graph("lifecycle").query("CREATE (:Marker {value: 42})")
pids = {"owner": __import__("os").getpid(), "redis": server.pid, "running": server.running}
print("PIDS", json.dumps(pids), flush=True)
sys.stdin.read()
server.stop()
"""


class Owner:
    """A child Python process that owns an embedded FalkorDB in ``data_dir``."""

    def __init__(self, data_dir: Path, mode: str) -> None:
        self.process = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", _OWNER_SCRIPT, str(data_dir), mode],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:  # log lines come first (structlog writes to stdout)
            if line.startswith("PIDS "):
                break
        else:
            self.process.wait(10)
            pytest.fail(f"the owner process failed: {self.process.stderr.read() if self.process.stderr else ''}")
        info = json.loads(line.removeprefix("PIDS "))
        assert info["owner"] == self.process.pid
        self.redis_pid: int = info["redis"]
        self.server_running: bool = info["running"]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # a clean exit: the child stops its server
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def _exited(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (its reaper is init, not us)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def _runs_in(pid: int, data_dir: Path) -> bool:
    """The pid is still the redis-server a test's child started on ``data_dir`` (not a recycled pid)."""
    try:
        return not _exited(pid) and Path(os.readlink(f"/proc/{pid}/cwd")) == data_dir.resolve()
    except OSError:
        return False


def _wait_exited(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(pid):
            return True
        time.sleep(0.05)
    return _exited(pid)


@pytest.fixture
def owners(own_falkordb_dir: Path) -> Iterator[list[Owner]]:
    """Owner processes of a test; any redis-server they leave on the test's directory is killed by pid."""
    started: list[Owner] = []
    yield started
    for owner in started:
        owner.close()
        if _runs_in(owner.redis_pid, own_falkordb_dir):
            os.kill(owner.redis_pid, signal.SIGKILL)


def _marker_count(server: EmbeddedFalkorDB) -> int:
    result = server.client().select_graph("lifecycle").query("MATCH (m:Marker {value: 42}) RETURN count(m)")
    return int(result.result_set[0][0])


@pytest.mark.parametrize("mode", ["main", "thread"])
def test_the_server_dies_with_its_sigkilled_owner(own_falkordb_dir: Path, owners: list[Owner], mode: str) -> None:
    owner = Owner(own_falkordb_dir, mode)
    owners.append(owner)
    # Started from a thread that has exited by now: still running (PDEATHSIG is tied to the forking thread).
    assert owner.server_running
    assert _runs_in(owner.redis_pid, own_falkordb_dir)

    owner.kill()

    assert _wait_exited(owner.redis_pid, 10), "the redis-server outlived its SIGKILLed owner"
    # SIGTERM let redis shut down cleanly: nothing stale for the next start, and the acknowledged write is there.
    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        assert _marker_count(server) == 1


def test_a_server_left_by_a_dead_owner_is_stopped_and_its_data_kept(
    own_falkordb_dir: Path, owners: list[Owner]
) -> None:
    owner = Owner(own_falkordb_dir, "untied")
    owners.append(owner)
    owner.kill()
    time.sleep(0.5)
    assert _runs_in(owner.redis_pid, own_falkordb_dir), "the untied server should have outlived its owner"
    assert (own_falkordb_dir / PID_NAME).exists()

    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        assert _exited(owner.redis_pid)
        assert server.pid != owner.redis_pid
        assert _marker_count(server) == 1
        assert json.loads((own_falkordb_dir / OWNER_NAME).read_text())["redis_pid"] == server.pid
    assert not (own_falkordb_dir / OWNER_NAME).exists()


def test_a_server_whose_owner_lives_is_refused_in_one_line(own_falkordb_dir: Path, owners: list[Owner]) -> None:
    owner = Owner(own_falkordb_dir, "main")
    owners.append(owner)

    with pytest.raises(FalkorDBStartupError) as refused:
        EmbeddedFalkorDB(own_falkordb_dir).start()

    message = str(refused.value)
    assert "\n" not in message
    assert "already runs" in message
    assert f"pid {owner.redis_pid}" in message
    assert f"started by pid {owner.process.pid}" in message
    assert "COMPASSMEM_DATA_DIR" in message
    assert _runs_in(owner.redis_pid, own_falkordb_dir)
    assert owner.process.poll() is None


def test_a_pid_file_naming_another_process_signals_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "falkordb"
    data_dir.mkdir()
    bystander = subprocess.Popen(["sleep", "60"], cwd=data_dir)  # noqa: S603, S607 - even its cwd matches
    dead = subprocess.Popen(["true"])  # noqa: S603, S607
    dead.wait()
    try:
        (data_dir / PID_NAME).write_text(f"{bystander.pid}\n")
        (data_dir / OWNER_NAME).write_text(json.dumps({"owner_pid": dead.pid, "redis_pid": bystander.pid}))
        with EmbeddedFalkorDB(data_dir) as server:
            assert server.running
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_redis_server_of_another_directory_is_not_signalled(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # noqa: S603, S607
    dead.wait()
    with EmbeddedFalkorDB(tmp_path / "a") as other:
        data_dir = tmp_path / "b"
        data_dir.mkdir()
        (data_dir / PID_NAME).write_text(f"{other.pid}\n")
        (data_dir / OWNER_NAME).write_text(json.dumps({"owner_pid": dead.pid, "redis_pid": other.pid}))
        with EmbeddedFalkorDB(data_dir) as server:
            assert server.running
            assert other.running
            assert other.redis_client().ping()


def test_the_append_only_file_is_compacted_as_it_grows_and_a_restart_loads_the_graph(tmp_path: Path) -> None:
    """Replaying an AOF re-runs every graph query ever written: 64 MB of them (redis's default size for a first
    rewrite) did not load in 120 s. The server rewrites it as it grows, so the graph comes back from an RDB base and
    a short log."""
    data_dir = tmp_path / "graph"
    padding = "x" * 2000
    with EmbeddedFalkorDB(data_dir) as server:
        graph = server.client().select_graph("growth")
        for i in range(3000):  # the AOF logs commands, not nodes: 3,000 commands of ~2 KB
            graph.query("CREATE (:Note {i: $i, text: $text})", {"i": i, "text": padding})
        written = graph.query("MATCH (n:Note) RETURN count(n)").result_set[0][0]
        aof_dir = data_dir / "appendonlydir"
        with server.redis_client() as conn:
            # Redis checks the growth in its timer (10 times a second) and rewrites in a child: wait for one to end.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                persistence = conn.info("persistence")
                rewritten = any(not p.name.startswith("appendonly.aof.1.") for p in aof_dir.glob("*.base.rdb"))
                if rewritten and not persistence.get("aof_rewrite_in_progress") \
                        and not persistence.get("aof_rewrite_scheduled"):
                    break
                time.sleep(0.05)
    bases = sorted(aof_dir.glob("*.base.rdb"))
    increments = list(aof_dir.glob("*.incr.aof"))
    assert written == 3000
    # 6 MB of queries went in; the log was rewritten at least once, and what is left to replay is less than that.
    assert bases and not bases[-1].name.startswith("appendonly.aof.1."), [p.name for p in aof_dir.iterdir()]
    assert sum(p.stat().st_size for p in increments) < 6_000_000
    with EmbeddedFalkorDB(data_dir) as server:
        assert server.client().select_graph("growth").query("MATCH (n:Note) RETURN count(n)").result_set[0][0] == 3000
