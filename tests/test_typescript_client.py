"""The TypeScript client (``clients/typescript/``) as CI builds it: ``npm ci`` and ``npm run build``, its committed
OpenAPI types against the API's current document, its Node tests (``node --test``) against a real ``compassmem
dev`` (the ``served_memory`` fixture, whose address and keys they get from the environment), and the example of
docs/typescript.md run against the same server."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from conftest import ServedMemory

from compassmem.query_api.openapi import openapi_json

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
PAGE = ROOT / "docs" / "typescript.md"
# The address the page's example uses: `compassmem dev`'s default.
PAGE_URL = "http://127.0.0.1:8080"
COMMITTED_TYPES = PACKAGE / "src" / "openapi.ts"
# The Node tests of clients/typescript/test/: at least this many must pass, so that none went missing unnoticed.
NODE_TESTS = 16


def _run(args: Sequence[str], cwd: Path = PACKAGE, env: Mapping[str, str] | None = None,
         timeout_s: float = 300) -> str:
    done = subprocess.run(list(args), cwd=cwd, env=dict(env) if env is not None else None, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, (f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-6000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done.stdout


@pytest.fixture(scope="module")
def built() -> Path:
    """The package's locked devDependencies installed and its sources compiled (dist/)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    assert not missing, f"{' and '.join(missing)} not found: `make tools` installs Debian's nodejs and npm"
    _run(["npm", "ci", "--no-audit", "--no-fund"])
    _run(["npm", "run", "build"])
    return PACKAGE


def test_the_committed_types_are_those_of_the_current_api(built: Path, tmp_path: Path) -> None:
    document = tmp_path / "openapi.json"
    document.write_text(openapi_json(), encoding="utf-8")
    _run([str(built / "node_modules" / ".bin" / "openapi-typescript"), str(document), "--output",
          str(tmp_path / "openapi.ts")])
    assert (tmp_path / "openapi.ts").read_text(encoding="utf-8") == COMMITTED_TYPES.read_text(encoding="utf-8"), (
        "clients/typescript/src/openapi.ts is stale: the API changed. Regenerate it with "
        "`cd clients/typescript && PYTHON=../../.venv/bin/python npm run generate`, then fix what no longer compiles")


def test_the_node_tests_pass_against_a_served_memory(built: Path, served_memory: ServedMemory) -> None:
    env = {**os.environ, "COMPASSMEM_TEST_URL": served_memory.url,
           "COMPASSMEM_TEST_KEY_TENANT": served_memory.key_tenant, "COMPASSMEM_TEST_KEY": served_memory.key,
           "COMPASSMEM_TEST_ADMIN_KEY": served_memory.admin_key,
           "COMPASSMEM_TEST_MAX_BODY_BYTES": str(served_memory.max_body_bytes)}
    # `npm test` compiles the tests (pretest), then runs node --test; TAP, whose summary lines are read here.
    output = _run(["npm", "test"], env=env)
    summary = dict(re.findall(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$", output, flags=re.MULTILINE))
    assert summary.get("fail") == "0" and summary.get("cancelled") == "0", output[-6000:]
    assert summary.get("skipped") == "0" and summary.get("todo") == "0", output[-6000:]
    assert int(summary.get("pass", "0")) >= NODE_TESTS, output[-6000:]


def test_the_documented_example_compiles_and_runs(built: Path, served_memory: ServedMemory, tmp_path: Path) -> None:
    [example] = re.findall(r"^```ts\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    assert PAGE_URL in example
    (tmp_path / "example.ts").write_text(example.replace(PAGE_URL, served_memory.url), encoding="utf-8")
    # As an installed package: resolved through node_modules, by its package.json's exports and types.
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "compassmem-client").symlink_to(built)
    (tmp_path / "package.json").write_text(json.dumps({"type": "module"}), encoding="utf-8")
    _run([str(built / "node_modules" / ".bin" / "tsc"), "--strict", "--target", "es2022", "--module", "nodenext",
          "--moduleResolution", "nodenext", "--lib", "es2022,dom", "--outDir", "out", "example.ts"], cwd=tmp_path)
    output = _run(["node", "out/example.js"], cwd=tmp_path, timeout_s=60)
    assert "S2:2" in output and "priya-tom" in output, output
    assert "question: must not be blank" in output, output
