"""An unusable COMPASSMEM_DATA_DIR, or stores another process holds, end a command with one line naming the
problem and exit code 2, never a traceback. Each case runs ``python -m compassmem.cli`` in a real process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "compassmem.cli"]
COMMANDS = {
    "ingest": ["ingest", "turns.jsonl"],
    "ask": ["ask", "c1", "what happened?"],
    "build-index": ["build-index"],
    "worker": ["worker"],
    "dev": ["dev", "--port", "0"],
    "broker": ["broker", "--port", "0"],
}


def _run(argv: list[str], data_dir: Path | str, cwd: Path, timeout: float = 120,
         prefix: list[str] = CLI) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env["COMPASSMEM_DATA_DIR"] = str(data_dir)
    # Nothing that could reach a broker or a model hub if a check were missing: the run must fail before that.
    env["COMPASSMEM_KAFKA_BOOTSTRAP"] = "127.0.0.1:1"
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(  # noqa: S603
        [*prefix, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _assert_one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_data_dir_that_is_a_file_fails_every_store_command_in_one_line(tmp_path: Path, command: str) -> None:
    data_dir = tmp_path / "not-a-dir"
    data_dir.write_text("a file\n")

    result = _run(COMMANDS[command], data_dir, tmp_path)

    _assert_one_error_line(result, f"COMPASSMEM_DATA_DIR={data_dir}", "not a writable directory", "it is a file")
    # Nothing else on stderr either: the check runs before any set-up that logs.
    assert result.stderr.strip().splitlines() == [f"error: COMPASSMEM_DATA_DIR={data_dir}: not a writable "
                                                  "directory (it is a file)"]


def test_a_data_dir_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    data_dir = tmp_path / "file" / "data"

    result = _run(COMMANDS["ask"], data_dir, tmp_path)

    _assert_one_error_line(result, f"COMPASSMEM_DATA_DIR={data_dir}", f"({tmp_path / 'file'} is a file)")


def test_a_directory_nobody_may_write_to(tmp_path: Path) -> None:
    # /proc takes no new files, not even from root.
    result = _run(COMMANDS["ingest"], "/proc", tmp_path)

    _assert_one_error_line(result, "COMPASSMEM_DATA_DIR=/proc", "not a writable directory")


# Root writes through permission bits, so as root the CLI drops to nobody once its modules are imported (the
# interpreter itself may sit where nobody cannot read); otherwise it runs as it is.
_AS_NOBODY = """
import os, sys
import compassmem.cli.main, compassmem.sinks.factory
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
sys.exit(compassmem.cli.main.main(sys.argv[1:]))
"""


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
@pytest.mark.parametrize(("mode", "below"), [(0o555, False), (0o000, True)], ids=["read-only", "forbidden"])
def test_a_read_only_or_forbidden_directory(mode: int, below: bool) -> None:
    # Not under tmp_path: root's pytest directories are private, which would fail the run for another reason.
    shared = Path(tempfile.mkdtemp(prefix="compassmem-perm-"))
    locked = shared / "locked"
    try:
        shared.chmod(0o755)
        locked.mkdir()
        locked.chmod(mode)
        data_dir = locked / "data" if below else locked
        argv = COMMANDS["ask"]
        if os.geteuid() == 0:
            argv = ["-c", _AS_NOBODY, *argv]
            result = _run(argv, data_dir, Path("/"), prefix=[sys.executable])
        else:
            result = _run(argv, data_dir, shared)
    finally:
        if locked.exists():
            locked.chmod(0o755)
        shutil.rmtree(shared)

    _assert_one_error_line(result, f"COMPASSMEM_DATA_DIR={data_dir}", "not a writable directory (Permission denied)")


_HOLDER = """
import sys
from pathlib import Path
from compassmem.core.config import Settings
from compassmem.sinks.factory import open_stores

with open_stores(Settings(data_dir=Path(sys.argv[1])), dim=384):
    print("HOLDING", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("command", ["ask", "build-index"])
def test_a_store_command_while_another_process_holds_the_embedded_stores(tmp_path: Path, command: str) -> None:
    """What `compassmem ask` or `build-index` meets while `compassmem dev` runs on the same data directory."""
    data_dir = tmp_path / "data"
    holder = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", _HOLDER, str(data_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert holder.stdout is not None
        assert any(line.startswith("HOLDING") for line in holder.stdout), "the holder did not open the stores"

        result = _run(COMMANDS[command], data_dir, tmp_path)

        _assert_one_error_line(result, "another process", str(data_dir.name))
        assert holder.poll() is None
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        try:
            holder.wait(30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(("variable", "url", "what"), [
    ("COMPASSMEM_QDRANT_URL", "http://127.0.0.1:{port}", "the Qdrant server"),
    ("COMPASSMEM_FALKORDB_URL", "redis://127.0.0.1:{port}", "FalkorDB"),
])
def test_a_store_server_that_cannot_be_reached_is_one_line_naming_its_url(
        tmp_path: Path, variable: str, url: str, what: str) -> None:
    target = url.format(port=_free_port())  # nothing listens there: connection refused
    result = _run(COMMANDS["ask"], tmp_path / "data", tmp_path,
                  prefix=["env", f"{variable}={target}", *CLI])
    _assert_one_error_line(result, f"{variable}={target}", f"cannot reach {what}")


def test_build_index_on_a_usable_data_dir_succeeds(tmp_path: Path) -> None:
    result = _run(COMMANDS["build-index"], tmp_path / "data", tmp_path)

    assert result.returncode == 0, result.stderr
    assert "search index built in" in result.stdout
