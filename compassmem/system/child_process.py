"""Servers the project starts itself (dev broker, embedded FalkorDB): stopping them, and tying them to us.

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not when the process does (see prctl(2):
"the parent" is the creating thread). A server forked from a short-lived thread (a TestClient's portal, a
thread pool, a sidecar) would therefore get SIGTERM as soon as that thread ends. ``popen_tied_to_us`` forks
on the main thread, or hands the fork to one spawner thread that lives as long as the process, so the signal
comes exactly when the process dies, SIGKILL included.

Each child also gets a session of its own: Ctrl-C in the terminal signals the terminal's foreground process group,
and a server in it would die at once, before the command it serves could finish or undo its writes (an import's
undo needs its FalkorDB). The command stops its servers itself, in order.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

_PR_SET_PDEATHSIG = 1
_LINUX = sys.platform.startswith("linux")
# Resolved in the parent: loading a library between fork and exec (in preexec_fn) may deadlock on the loader lock.
_prctl: Any = ctypes.CDLL(None, use_errno=True).prctl if _LINUX else None


class ParentGoneError(RuntimeError):
    """The parent died between fork and prctl, so PDEATHSIG would never fire: the child must not run."""


def die_with_parent() -> None:
    """preexec_fn for children that must not outlive us: SIGTERM when the parent dies (Linux; elsewhere a no-op).

    Mind the thread rule in the module docstring; ``popen_tied_to_us`` takes care of it.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _die_with(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        die_with_parent()
        if os.getppid() != parent_pid:
            raise ParentGoneError("the parent died before the child was tied to it")

    return preexec


class _Spawner:
    """One daemon thread that forks children for other threads; it never exits before the process does."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.requests: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[Any]]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name="compassmem-child-spawner", daemon=True).start()

    def _serve(self) -> None:
        while True:
            make, future = self.requests.get()
            try:
                future.set_result(make())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)

    def spawn(self, make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        future: Future[subprocess.Popen[bytes]] = Future()
        self.requests.put((make, future))
        return future.result()


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def popen_tied_to_us(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` whose child gets SIGTERM when this process dies (Linux), whichever thread calls it."""
    if not _LINUX:
        return subprocess.Popen(args, start_new_session=True, **kwargs)  # noqa: S603 - callers pass our own binaries
    preexec = _die_with(os.getpid())

    def make() -> subprocess.Popen[bytes]:
        return subprocess.Popen(args, preexec_fn=preexec, start_new_session=True,  # noqa: S603, PLW1509
                                **kwargs)

    if threading.current_thread() is threading.main_thread():
        return make()
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner.pid != os.getpid():  # none yet, or one inherited through a fork
            _spawner = _Spawner()
        spawner = _spawner
    return spawner.spawn(make)


def terminate(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; True when it had to be killed."""
    if process.poll() is not None:
        return False
    process.terminate()
    try:
        process.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return True
