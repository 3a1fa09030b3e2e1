"""Markdown headings as link fragments, the way GitHub makes them."""

from __future__ import annotations

import re

_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def heading_anchors(markdown: str) -> set[str]:
    """The fragment of each heading: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for line in markdown.splitlines():
        match = _HEADING.match(line)
        if match:
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-"))
    return anchors
