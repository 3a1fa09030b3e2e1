"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing page or a wrong anchor fails
it), fetches nothing, and its HTTP reference lists every path and method of the API's OpenAPI document."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"
_METHODS = ("get", "post", "put", "patch", "delete")


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("http_reference", ROOT / "docs" / "hooks" / "http_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MKDOCS.exists():
        pytest.fail(f"{MKDOCS} is missing: the docs extra installs it (pip install -e '.[docs]', make install)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(out)], cwd=ROOT, env=env, check=False,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


def test_the_http_reference_lists_every_path_and_method(site: Path) -> None:
    reference = _text(site / "reference" / "http" / "index.html")
    assert "This page is written when" not in reference, "the placeholder was not replaced by the generated page"
    document = _hook().openapi_document()
    operations = [f"{method.upper()} {path}" for path, item in document["paths"].items()
                  for method in _METHODS if method in item]
    assert operations
    missing = [operation for operation in operations if operation not in reference]
    assert not missing, f"operations missing from the HTTP reference: {missing}"
    undocumented = [name for name in document["components"]["schemas"] if f'id="schema-{name.lower()}"'
                    not in (site / "reference" / "http" / "index.html").read_text(encoding="utf-8")]
    assert not undocumented, f"schemas missing from the HTTP reference: {undocumented}"


def test_every_markdown_file_of_docs_is_a_page(site: Path) -> None:
    pages = [path.relative_to(ROOT / "docs") for path in (ROOT / "docs").rglob("*.md")]
    for page in pages:
        name = "index" if page.stem in {"index", "README"} else page.stem
        built = site / page.parent / ("index.html" if name == "index" else f"{name}/index.html")
        assert built.is_file(), f"docs/{page} has no page in the site"


def test_the_site_loads_no_web_fonts(site: Path) -> None:
    fetched = [f"{page.relative_to(site)}: {url}" for page in site.rglob("*.html")
               for url in re.findall(r"(?:src|href)=\"(https?://[^\"]+)\"", page.read_text(encoding="utf-8"))
               if "fonts.g" in url or url.endswith((".css", ".js", ".woff", ".woff2"))]
    assert not fetched, "the site loads assets from the network:\n" + "\n".join(fetched)


def test_the_decision_index_lists_every_record() -> None:
    decisions = ROOT / "docs" / "decisions"
    index = (decisions / "README.md").read_text(encoding="utf-8")
    records = sorted(path.name for path in decisions.glob("[0-9][0-9][0-9]-*.md"))
    assert records
    assert not [name for name in records if f"]({name})" not in index], "records missing from docs/decisions/README.md"
    numbers = [name[:3] for name in records]
    assert numbers == [f"{n:03d}" for n in range(1, len(numbers) + 1)], f"records are numbered in order: {numbers}"
