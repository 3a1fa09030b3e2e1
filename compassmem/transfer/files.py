"""Where an export goes and an import comes from: a path, or a stream the caller owns (stdout, stdin)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

Target = str | os.PathLike[str] | TextIO


@contextmanager
def writing(target: Target) -> Iterator[TextIO]:
    """A path is written under a temporary name and renamed into place at the end, so an export that fails leaves
    no file that looks complete, and never half of one over an older export. A stream is used as it is."""
    if not isinstance(target, str | os.PathLike):
        yield target
        return
    path = Path(target)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as out:
            yield out
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


@contextmanager
def reading(source: Target) -> Iterator[TextIO]:
    if not isinstance(source, str | os.PathLike):
        yield source
        return
    with Path(source).open(encoding="utf-8") as lines:
        yield lines
