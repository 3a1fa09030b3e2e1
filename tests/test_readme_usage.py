"""The usage pages stay true: the code blocks of "Use from Python" (docs/library.md), "LangGraph and LangChain"
(docs/integrations.md) and "Use from an agent (MCP)" (docs/mcp.md), and the README's own snippet, are run against
real stores (the library, the LangGraph and LangChain adapters), a real server (the clients, see ``served_memory``)
and a spawned ``compassmem mcp`` (the agent configuration). The README stays a front door: at most 250 lines."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import anyio
import pytest
from conftest import ServedMemory
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_library import MODEL_CACHE

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 250
# The page each title's section lives on.
PAGES = {"Use from Python": ROOT / "docs" / "library.md", "Use from an agent (MCP)": ROOT / "docs" / "mcp.md",
         "LangGraph and LangChain": ROOT / "docs" / "integrations.md"}
# The address the client snippets use: `compassmem dev`'s default.
README_URL = "http://127.0.0.1:8080"


def section(title: str) -> str:
    text = PAGES[title].read_text()
    assert text.startswith(f"# {title}\n"), f"{PAGES[title]} is no longer the page of {title!r}"
    return text


def blocks(title: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", section(title), flags=re.MULTILINE | re.DOTALL)


def run_snippet(code: str, source: Path = PAGES["Use from Python"]) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "readme_snippet"}
    exec(compile(code, str(source), "exec"), namespace)  # noqa: S102 - the documentation's own code, on purpose
    return namespace


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    [snippet] = re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.MULTILINE | re.DOTALL)
    for name in [key for key in os.environ if key.startswith("COMPASSMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COMPASSMEM_EMBEDDER_CACHE_DIR", str(MODEL_CACHE))
    monkeypatch.chdir(tmp_path)  # Memory() keeps its stores in ./.compassmem
    run_snippet(snippet, README)
    assert "['1']" in capsys.readouterr().out.splitlines()


def test_the_python_section_has_the_library_and_client_snippets() -> None:
    snippets = blocks("Use from Python", "python")
    assert len(snippets) == 3
    assert "Memory()" in snippets[0]
    assert all(README_URL in snippet for snippet in snippets[1:])


def test_the_library_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    for name in [key for key in os.environ if key.startswith("COMPASSMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COMPASSMEM_EMBEDDER_CACHE_DIR", str(MODEL_CACHE))
    monkeypatch.chdir(tmp_path)  # Memory() keeps its stores in ./.compassmem
    namespace = run_snippet(blocks("Use from Python", "python")[0])
    assert set(namespace["response"].turn_ids) == {"1", "2"}  # type: ignore[attr-defined]
    assert (tmp_path / ".compassmem" / "qdrant").is_dir()
    assert "no memory for conversation 'ana-ben'" in capsys.readouterr().out


def test_the_langgraph_and_langchain_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for name in [key for key in os.environ if key.startswith("COMPASSMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COMPASSMEM_EMBEDDER_CACHE_DIR", str(MODEL_CACHE))
    monkeypatch.chdir(tmp_path)
    [snippet] = blocks("LangGraph and LangChain", "python")
    run_snippet(snippet)
    out = capsys.readouterr().out
    assert "We moved the Lisbon trip to May because Ben's passport expired." in out
    assert "[('default', 'ana', 'trip')]" in out
    assert "Booked: Lisbon, May 3 to 10." in out
    assert "['Book Lisbon for May.', 'Booked: Lisbon, May 3 to 10.']" in out


@pytest.mark.parametrize("index", [1, 2], ids=["Client", "AsyncClient"])
def test_the_client_snippets_run_against_a_server(index: int, served_memory: ServedMemory,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    namespace = run_snippet(blocks("Use from Python", "python")[index].replace(README_URL, served_memory.url))
    out = capsys.readouterr().out
    if index == 1:
        assert "S2:2" in namespace["response"].turn_ids  # type: ignore[attr-defined]
        assert "[('question', 'must not be blank')]" in out
    else:
        assert "S3:1" in out


def test_the_agent_configuration_starts_the_mcp_server(tmp_path: Path) -> None:
    mcp = section("Use from an agent (MCP)")
    [config_text] = blocks("Use from an agent (MCP)", "json")
    server = json.loads(config_text)["mcpServers"]["compassmem"]
    # The configuration's placeholders, made real: this checkout's command and a temporary data directory.
    command = Path(sys.executable).parent / Path(server["command"]).name
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update({**server["env"], "COMPASSMEM_DATA_DIR": str(tmp_path / "memory"),
                "COMPASSMEM_EMBEDDER_CACHE_DIR": str(MODEL_CACHE)})
    params = StdioServerParameters(command=str(command), args=server["args"], env=env)
    documented = set(re.findall(r"`(remember|recall|list_conversations|forget|redact_turn)`", mcp))

    async def main() -> set[str]:
        with anyio.fail_after(120), (tmp_path / "mcp.log").open("w") as log:
            async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return {tool.name for tool in (await session.list_tools()).tools}

    assert anyio.run(main) == documented == {"remember", "recall", "list_conversations", "forget", "redact_turn"}
    port = re.search(r"`compassmem mcp --port (\d+)`", mcp)
    assert port is not None and f"`http://127.0.0.1:{port.group(1)}/mcp`" in mcp
