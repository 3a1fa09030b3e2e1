"""The ``compassmem dev`` that holds a data directory, as it announces itself there: ``dev-server.json``.

While ``dev`` runs, the embedded stores of its data directory belong to it, and its broker listens on a port that
may be any free one. So it writes its pid and the broker's address into the data directory once it holds the
stores, adds the query API's URL once that listens, and removes the file when it stops. Other commands read it:
``produce`` finds the broker, ``wait-ready`` the URL, and a command or a ``Memory`` that finds the stores held
says in one line where the running server is (``sinks/factory.py``). A file left by a killed ``dev`` is ignored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

FILE_NAME = "dev-server.json"


class DevServer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int
    broker: str
    # None while the API is starting.
    api_url: str | None = None


def running_dev(data_dir: Path) -> DevServer | None:
    """The ``compassmem dev`` announced in ``data_dir``; None when there is none (or its process is gone)."""
    try:
        server = DevServer.model_validate_json((data_dir / FILE_NAME).read_bytes())
    except (OSError, ValidationError):
        return None
    return server if _is_compassmem(server.pid) else None


@contextmanager
def announced(data_dir: Path, server: DevServer) -> Iterator[Callable[[str], None]]:
    """Announce ``server`` in ``data_dir`` for the block; yields the call that adds the API's URL once it listens.
    The file goes when the block ends (a file left by a SIGKILL is ignored: its pid is gone)."""
    _write(data_dir, server)
    try:
        yield lambda url: _write(data_dir, server.model_copy(update={"api_url": url}))
    finally:
        if (found := running_dev(data_dir)) is not None and found.pid == server.pid:
            (data_dir / FILE_NAME).unlink(missing_ok=True)


def _write(data_dir: Path, server: DevServer) -> None:
    # Written aside and renamed: a reader never sees half a file.
    path = data_dir / FILE_NAME
    temporary = path.with_name(f".{FILE_NAME}.{server.pid}")
    temporary.write_text(server.model_dump_json(), encoding="utf-8")
    os.replace(temporary, path)


def _is_compassmem(pid: int) -> bool:
    """Whether ``pid`` is a running compassmem: after a kill -9 the pid may since belong to anything else."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        return b"compassmem" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc to ask (not Linux): the pid exists, which is all there is to know
