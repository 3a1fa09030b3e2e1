"""Where an export goes and an import comes from: a path, or a stream the caller owns (stdout, stdin)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from compassmem.transfer.reader import text_lines

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
    """A stream an import can read twice (it checks the whole file before writing any of it): the file at a path,
    a seekable stream as it is, and anything else (stdin from a pipe) copied line by line into an unnamed temporary
    file, deleted when the import ends, so that a large input is not held in memory."""
    if isinstance(source, str | os.PathLike):
        with Path(source).open(encoding="utf-8") as lines:
            yield lines
    elif source.seekable():
        yield source
    else:
        with tempfile.TemporaryFile("w+", encoding="utf-8") as copy:
            for _, text in text_lines(source):
                copy.write(text)
            copy.seek(0)
            yield copy
