"""The command line as an operator meets it: the version, and errors as one line instead of a traceback."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def test_version_prints_the_installed_package_version() -> None:
    done = subprocess.run([sys.executable, "-m", "compassmem.cli", "--version"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # The installed metadata comes from pyproject.toml: the two version strings cannot drift apart unnoticed.
    assert done.stdout.strip() == f"compassmem {version('compassmem')}"
