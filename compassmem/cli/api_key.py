"""The API key of the commands that ask a running API (``compassmem eval --url``, ``compassmem status``): from a
file (``--api-key-file``) or the environment (``COMPASSMEM_API_KEY``), not the command line, which every user of the
machine can read (``ps``, ``/proc/<pid>/cmdline``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from compassmem.core.config import API_KEY_VARIABLE
from compassmem.core.terminal import echo

ARGV_WARNING = (f"warning: --api-key shows the key to every user of this machine in the process list (ps); put it in "
                f"a file and pass --api-key-file FILE, or set {API_KEY_VARIABLE}")


class ApiKeyError(ValueError):
    """The key's file cannot be used; the message says why in one line (never the key)."""


def add_api_key_options(parser: argparse.ArgumentParser, whose: str) -> None:
    """``--api-key-file`` and the ``--api-key`` kept for scripts written before it, one or the other."""
    options = parser.add_mutually_exclusive_group()
    options.add_argument("--api-key-file", metavar="FILE",
                         help=f"a file whose first line is {whose}'s API key ('-': read it from stdin); without it, "
                              f"the key is {API_KEY_VARIABLE} from the environment, if set")
    options.add_argument("--api-key", metavar="KEY",
                         help=f"the key itself: avoid, every user of this machine sees it in the process list; use "
                              f"--api-key-file or {API_KEY_VARIABLE}")


def api_key_option_given(args: argparse.Namespace) -> bool:
    return args.api_key_file is not None or args.api_key is not None


def resolve_api_key(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> str | None:
    """The key to send: ``--api-key`` (with a warning on stderr), else the first line of ``--api-key-file``, else
    ``COMPASSMEM_API_KEY``, else None. Raises ApiKeyError for a file that is missing, unreadable or empty."""
    if args.api_key is not None:
        echo(ARGV_WARNING, file=sys.stderr)
        return args.api_key.strip() or None
    if args.api_key_file is not None:
        return _first_line(args.api_key_file)
    return environ.get(API_KEY_VARIABLE, "").strip() or None


def _first_line(path: str) -> str:
    where = "stdin" if path == "-" else path
    try:
        text = sys.stdin.readline() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else "not UTF-8 text"
        raise ApiKeyError(f"--api-key-file {where}: {reason}") from None
    key = text.partition("\n")[0].strip()
    if not key:
        raise ApiKeyError(f"--api-key-file {where}: the first line is empty; it must hold the API key")
    return key
