"""Servers the project starts itself (dev broker, embedded FalkorDB): stopping them, and tying them to us."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn for children that must not outlive us: SIGTERM when the parent dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


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
