"""The command line as an operator meets it: the version, and errors as one line instead of a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from offline_api import offline_app

from compassmem.cli.errors import one_line
from compassmem.query_api.openapi import openapi_document


def test_version_prints_the_installed_package_version() -> None:
    done = subprocess.run([sys.executable, "-m", "compassmem.cli", "--version"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # The installed metadata comes from pyproject.toml: the two version strings cannot drift apart unnoticed.
    assert done.stdout.strip() == f"compassmem {version('compassmem')}"


def _compassmem(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if not name.startswith("COMPASSMEM_")}
    environment.update(COMPASSMEM_DATA_DIR=str(data_dir), **env)
    return subprocess.run([sys.executable, "-m", "compassmem.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False, env=environment)


def _one_error_line(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    for part in expected:
        assert part in errors[0], errors[0]
    return errors[0]


def test_ingest_of_a_path_that_is_no_file_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "turns.jsonl"
    folder.mkdir()
    _one_error_line(_compassmem("ingest", str(folder), data_dir=tmp_path / "data"), str(folder), "Is a directory")


def test_ask_without_the_embedding_model_is_one_line(tmp_path: Path) -> None:
    # (`ask` while `compassmem dev` holds the stores: tests/test_data_dir_errors.py.)
    done = _compassmem("ask", "c1", "What happened?", data_dir=tmp_path / "data",
                       COMPASSMEM_EMBEDDER="onnx-int8", COMPASSMEM_EMBEDDING_MODEL=str(tmp_path / "no-model"))
    _one_error_line(done, "no-model", "COMPASSMEM_EMBEDDER=torch")


def test_a_torch_model_path_that_is_not_there_is_named_as_a_setting_not_a_store(tmp_path: Path) -> None:
    """It was told as "a store stopped answering ... check that Qdrant and FalkorDB are running" (the loader's
    FileNotFoundError is an OSError, as a store's lost connection is)."""
    done = _compassmem("ask", "c1", "What happened?", data_dir=tmp_path / "data",
                       COMPASSMEM_EMBEDDER="torch", COMPASSMEM_EMBEDDING_MODEL=str(tmp_path / "no-model"))
    line = _one_error_line(done, "COMPASSMEM_EMBEDDER=torch", f"COMPASSMEM_EMBEDDING_MODEL '{tmp_path / 'no-model'}'",
                           "not found")
    assert "store" not in line


def test_known_errors_are_one_line_and_bugs_keep_their_traceback() -> None:
    from compassmem.sinks.factory import StoreOpenError

    assert one_line(StoreOpenError("COMPASSMEM_DATA_DIR=/x: not a writable directory")) == \
        "COMPASSMEM_DATA_DIR=/x: not a writable directory"
    assert one_line(PermissionError(13, "Permission denied", "/data/turns.jsonl")) == \
        "/data/turns.jsonl: Permission denied"
    gone = one_line(ConnectionRefusedError(111, "Connection refused"))
    assert gone is not None and gone.startswith("a store stopped answering (ConnectionRefusedError")
    assert one_line(KeyError("a bug")) is None
    assert one_line(RuntimeError("a bug")) is None


# -- listening beyond this machine without keys --------------------------------------------------------------------

SERVERS = {"COMPASSMEM_QDRANT_URL": "http://127.0.0.1:9", "COMPASSMEM_FALKORDB_URL": "redis://127.0.0.1:9"}


def test_api_on_a_public_address_without_keys_refuses_to_start(tmp_path: Path) -> None:
    line = _one_error_line(_compassmem("api", "--host", "0.0.0.0", data_dir=tmp_path, **SERVERS),
                           "0.0.0.0", "COMPASSMEM_API_AUTH_REQUIRED", "--insecure-no-auth")
    assert "beyond this machine" in line


def test_dev_on_a_public_address_without_keys_refuses_to_start(tmp_path: Path) -> None:
    _one_error_line(_compassmem("dev", data_dir=tmp_path, COMPASSMEM_API_HOST="::"), "'::'", "--insecure-no-auth")


def test_insecure_no_auth_or_required_keys_let_a_public_address_through(tmp_path: Path) -> None:
    # Past the exposure check, `compassmem api` stops at the next one (no store servers answer here): nothing starts.
    keys = {"COMPASSMEM_API_KEYS": '["acme.0123456789abcdef0123"]', "COMPASSMEM_API_AUTH_REQUIRED": "true"}
    for args, env in ((("--insecure-no-auth",), SERVERS), ((), {**SERVERS, **keys})):
        done = _compassmem("api", "--host", "0.0.0.0", *args, data_dir=tmp_path, **env)
        assert "--insecure-no-auth" not in done.stderr, done.stderr
    # On loopback no flag is needed.
    assert "--insecure-no-auth" not in _compassmem("api", data_dir=tmp_path).stderr


def test_openapi_writes_the_document_the_api_serves(tmp_path: Path) -> None:
    out = tmp_path / "openapi.json"
    done = _compassmem("openapi", "--out", str(out), data_dir=tmp_path / "unused",
                       COMPASSMEM_API_KEYS='{"acme": "a-key-of-sixteen-chars"}')
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text(encoding="utf-8"))
    # What a served app answers at /openapi.json, whatever its settings, and every route the clients call.
    assert written == openapi_document() == offline_app(api_max_body_bytes=2048).openapi()
    assert {"/v1/query", "/v1/turns", "/v1/conversations", "/v1/tenants/{tenant}"} <= set(written["paths"])
    assert not (tmp_path / "unused").exists()
