"""The repository stands alone: what its files point a reader at is inside it.

A clone has no sibling folders and no design document of the machine it was written on, so no tracked file may
name one; every repository path a file mentions (``compassmem/...``, ``docs/...``) must exist, and every relative
link of a Markdown file must reach an existing file and, with a ``#fragment``, an existing heading.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from markdown_anchors import heading_anchors

ROOT = Path(__file__).resolve().parent.parent
# Written so that this file does not match them itself.
OUTSIDE = {
    "a sibling folder of the repository": re.compile(r"\.\./shared"),
    "a design document that is not in the repository": re.compile(r"DESIGN\.md"),
    "an absolute path on a development machine": re.compile(r"(?<![\w.])/(?:work|home|Users)/\w"),
}
_SKIPPED_SUFFIXES = {".png", ".jpg", ".gif", ".ico", ".onnx", ".gz", ".zip"}
_MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked_files() -> list[Path]:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listing = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    paths = [ROOT / name for name in listing.decode("utf-8").split("\0") if name]
    # A file deleted in the working tree but not yet in the index is not there for a reader either.
    return [path for path in paths if path.is_file() and path.suffix not in _SKIPPED_SUFFIXES]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def test_no_tracked_file_points_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in OUTSIDE.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_every_repository_path_mentioned_exists() -> None:
    files = tracked_files()
    top_folders = sorted({path.relative_to(ROOT).parts[0] for path in files if len(path.relative_to(ROOT).parts) > 1})
    mention = re.compile(r"(?<![\w/.-])((?:%s)/[\w./-]*\w)" % "|".join(re.escape(name) for name in top_folders))
    missing = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in mention.finditer(line):
                if not (ROOT / match.group(1)).exists():
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {match.group(1)}")
    assert not missing, "paths that do not exist in the repository:\n" + "\n".join(missing)


def test_markdown_links_reach_files_and_headings_in_the_repository() -> None:
    broken = []
    for path in tracked_files():
        if path.suffix != ".md":
            continue
        for target in _MARKDOWN_LINK.findall(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.is_file() or not linked.is_relative_to(ROOT):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file in the repository)")
            elif fragment and linked.suffix == ".md" and fragment not in heading_anchors(
                    linked.read_text(encoding="utf-8")):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_anchor_rule_matches_githubs() -> None:
    assert heading_anchors("## The write path: building memory\n### Settings\n") == {
        "the-write-path-building-memory", "settings"}
