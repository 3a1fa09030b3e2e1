"""docs/security.md names the test beside each promise (a test file and a test function, joined by ``::``): every
name must be a test that exists, so that the names cannot go stale when a test is renamed, moved or deleted. And what
an admin key reaches is told alike by the code, the setting's description, docs/settings.md and docs/security.md."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from functools import cache
from pathlib import Path

import pytest

import compassmem.query_api.routers as routers
from compassmem.core.config import Settings
from compassmem.query_api.auth import AdminRoute

ROOT = Path(__file__).resolve().parent.parent
SECURITY_PAGE = ROOT / "docs" / "security.md"
# A test named beside a promise; a parametrised one by its base name (an id in brackets after it is allowed).
REFERENCE = re.compile(r"tests/(test_\w+\.py)::(test_\w+)(?:\[[^\]`]*\])?")
FILE_REFERENCE = re.compile(r"tests/(test_\w+\.py)\b")
SETTINGS_PAGE = ROOT / "docs" / "settings.md"
# An HTTP route as the pages and the settings' descriptions write it: `DELETE /v1/tenants/{tenant}`.
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[^\s`),;]+)")


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


def admin_routes() -> set[tuple[str, str]]:
    """The routes that take an admin key (``AdminRoute``), read from the routers themselves."""
    modules = [importlib.import_module(f"{routers.__name__}.{info.name}")
               for info in pkgutil.iter_modules(routers.__path__)]
    return {(method, route.path) for module in modules for route in module.router.routes
            if isinstance(route, AdminRoute) for method in route.methods}


def security_admin_rows() -> str:
    """The route cells of the rows of the page's key table that only an admin key opens."""
    lines = SECURITY_PAGE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| route | no key |"))
    columns = [cell.strip() for cell in lines[start].strip("|").split("|")]
    tenant, admin = columns.index("the tenant's key"), columns.index("an admin key")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return " ".join(row[0] for row in rows if row[admin] == "yes" and row[tenant] != "yes")


def test_the_setting_and_both_pages_give_admin_keys_the_routes_the_code_does() -> None:
    routes = admin_routes()
    assert ("DELETE", "/v1/tenants/{tenant}") in routes, routes  # a guard on the walk itself
    setting_row = next(line for line in SETTINGS_PAGE.read_text(encoding="utf-8").splitlines()
                       if line.startswith("| `COMPASSMEM_API_ADMIN_KEYS` |"))
    told = {"Settings.api_admin_keys' description": Settings.model_fields["api_admin_keys"].description or "",
            "docs/settings.md's COMPASSMEM_API_ADMIN_KEYS row": setting_row,
            "docs/security.md's key table": security_admin_rows()}
    for where, text in told.items():
        assert set(ROUTE.findall(text)) == routes, f"{where} gives admin keys {sorted(set(ROUTE.findall(text)))}, " \
                                                   f"the code {sorted(routes)}"
