"""A second Kafka-protocol broker for the delivery tests: noida-db (PyPI) with only its Kafka service, on disk.

The dev broker (Tansu, memory-only) is what ``compassmem dev`` runs; testing the worker's delivery guarantees
against an independent implementation that persists to disk means a quirk of one broker can neither hide nor
cause a lost turn, and lets a test restart the broker itself. Only the process this object started is signalled.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from compassmem.system.child_process import popen_tied_to_us, terminate

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((HOST, port)) == 0


def noida_binary() -> str:
    from importlib.resources import files

    path = files("noida_db").joinpath("noida-db")
    Path(str(path)).chmod(0o755)
    return str(path)


class NoidaBroker:
    """``with NoidaBroker(data_dir) as broker: broker.bootstrap``; ``restart()`` keeps the data directory."""

    def __init__(self, data_dir: Path, log_path: Path, ready_timeout: float = 30.0) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> NoidaBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self._process = popen_tied_to_us(
            [noida_binary(), "start", "--only", "kafka", "--kafka-port", str(self.port), "--host", HOST,
             "--data-dir", str(self.data_dir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + self.ready_timeout
        while not _listening(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"noida-db did not listen on {self.bootstrap}: {tail}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            terminate(process, 10.0)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> NoidaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
