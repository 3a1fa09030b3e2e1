"""docs/security.md names the test beside each promise (a test file and a test function, joined by ``::``): every
name must be a test that exists, so that the names cannot go stale when a test is renamed, moved or deleted."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECURITY_PAGE = ROOT / "docs" / "security.md"
# A test named beside a promise; a parametrised one by its base name (an id in brackets after it is allowed).
REFERENCE = re.compile(r"tests/(test_\w+\.py)::(test_\w+)(?:\[[^\]`]*\])?")
FILE_REFERENCE = re.compile(r"tests/(test_\w+\.py)\b")


def references() -> list[tuple[str, str]]:
    return sorted(set(REFERENCE.findall(SECURITY_PAGE.read_text(encoding="utf-8"))))


@cache
def functions_of(file_name: str) -> frozenset[str]:
    """The test functions a test module defines, at its top level or in its classes."""
    tree = ast.parse((ROOT / "tests" / file_name).read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"))


def test_the_page_names_tests() -> None:
    # A guard on the pattern itself: the page names well over a hundred tests.
    assert len(references()) > 100, references()


@pytest.mark.parametrize(("file_name", "test_name"), references(), ids=[f"{f}::{t}" for f, t in references()])
def test_every_test_the_page_names_exists(file_name: str, test_name: str) -> None:
    assert (ROOT / "tests" / file_name).is_file(), f"docs/security.md names tests/{file_name}, which does not exist"
    assert test_name in functions_of(file_name), \
        f"docs/security.md names tests/{file_name}::{test_name}, which that file does not define"


def test_every_test_file_the_page_names_exists() -> None:
    named = set(FILE_REFERENCE.findall(SECURITY_PAGE.read_text(encoding="utf-8")))
    assert named, "the page names no test file"
    assert {name for name in named if not (ROOT / "tests" / name).is_file()} == set()


def test_every_table_of_the_page_has_a_tested_by_column() -> None:
    lines = SECURITY_PAGE.read_text(encoding="utf-8").splitlines()
    headers = [line for before, line in zip(["", *lines], lines, strict=False)
               if line.startswith("|") and not before.startswith("|")]
    assert headers, "the page has no table"
    for header in headers:
        assert header.rstrip(" |").endswith("tested by"), header
