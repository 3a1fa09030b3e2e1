"""The import layers of compassmem, checked from the source, so that the layering stays true.

Every module under ``compassmem/`` belongs to one unit (its top-level package, e.g. ``retrieval``; ``""`` is
``compassmem/__init__.py``), and every unit to one layer of ``LAYERS``. A module may
import from its own layer and the layers below it, never from one above; and neither units nor single modules may
import each other in a cycle, within a layer either. Every import counts: at module level, inside functions (the
lazy ones) and under ``if TYPE_CHECKING``. Third-party frameworks stay in the units or modules that
adapt them (``FRAMEWORKS``), and what the offline evaluation imports loads no web framework at all.

A new package must be given a layer here: the test fails for a unit it does not know. No module but
``__init__`` stands outside a package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "compassmem"

# Bottom first. Each entry: (layer name, units).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The records, settings and errors every layer shares (core), and the operating system's side (system).
    ("foundation", ("core", "system")),
    # Text analysis (the stores and the read side use it, so it sits below them) and the embedders.
    ("text and embeddings", ("text", "embedding")),
    # The write path's logic, free of stores.
    ("processors", ("processors",)),
    # The stores (sinks.sink_group takes the processors' MemoryUpdate), and the producer of the worker's input
    # topics (what every process but the worker writes there).
    ("stores and input topics", ("sinks", "publish")),
    # llm: the client and the write path's LLM steps (they build on write.pipeline's LlmSteps).
    ("write and read paths", ("write", "retrieval", "llm")),
    # library.runtime_settings: the keys' rules are the rules of the write and read paths' own config fields.
    ("library and tools", ("library", "transfer", "evaluation", "monitoring")),
    # Adapters: the worker, HTTP, MCP, the command line, the package's public facade and the agent frameworks'
    # adapters (the optional extra `langchain`).
    ("adapters", ("streams", "query_api", "mcp", "cli", "", "integrations")),
)

# Framework -> the units or modules (named below compassmem) that may import it (directly; the subprocess test
# below checks what loads transitively).
FRAMEWORKS: dict[str, frozenset[str]] = {
    "fastapi": frozenset({"query_api"}),
    "starlette": frozenset({"query_api"}),
    "uvicorn": frozenset({"query_api"}),
    "faust": frozenset({"streams"}),
    "kafka": frozenset({"streams", "query_api", "publish"}),
    "mcp": frozenset({"mcp"}),
    # Optional (pip install compassmem[langchain]): nothing outside the adapters of that extra may need them.
    "langgraph": frozenset({"integrations"}),
    "langchain_core": frozenset({"integrations"}),
    "opentelemetry": frozenset({"core.tracing", "query_api"}),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "compassmem.retrieval.engine"
    path: str  # its file, relative to the repository root
    line: int
    target: str  # the imported module: for ``from X import name``, X.name when that is a module, else X


def unit_of(module: str) -> str:
    """``compassmem.retrieval.engine`` -> ``retrieval``, ``compassmem`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_index(layers: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, int]:
    return {unit: index for index, (_, units) in enumerate(layers) for unit in units}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, path: str, is_package: bool,
               modules: frozenset[str] = frozenset()) -> Iterator[Import]:
    """Every import statement of a module, wherever it stands, with relative imports made absolute.
    ``from package import name`` imports the module ``package.name`` when ``modules`` holds it."""
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield Import(module, path, node.lineno, submodule if submodule in modules else target)


def all_modules(root: Path = PACKAGE_DIR) -> frozenset[str]:
    return frozenset(module_name(path, root) for path in root.rglob("*.py"))


def all_imports(root: Path = PACKAGE_DIR) -> list[Import]:
    paths = sorted(root.rglob("*.py"))
    modules = all_modules(root)
    found = []
    for path in paths:
        relative = str(path.relative_to(root.parent))
        found.extend(imports_of(path.read_text(encoding="utf-8"), module_name(path, root), relative,
                                path.name == "__init__.py", modules))
    return found


def _internal(target: str) -> bool:
    return target == "compassmem" or target.startswith("compassmem.")


def unknown_units(modules: Iterable[str], layers: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
    """The units of ``modules`` that ``layers`` does not place."""
    known = layer_index(layers)
    return sorted({unit_name(m) for m in modules if unit_of(m) not in known})


def upward_imports(imports: Iterable[Import], layers: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
    """One line per import of a higher layer: where it is, and from which layer to which."""
    index = layer_index(layers)
    found = []
    for i in imports:
        if not _internal(i.target):
            continue
        source, target = index.get(unit_of(i.module)), index.get(unit_of(i.target))
        if source is not None and target is not None and target > source:
            found.append(f"{i.path}:{i.line}: {i.module} imports {i.target}: layer {layers[source][0]!r} -> "
                         f"higher layer {layers[target][0]!r}")
    return found


def unit_name(module: str) -> str:
    """The unit of a module by its full name: ``compassmem.retrieval``, ``compassmem``."""
    return ".".join(module.split(".")[:2])


def import_cycles(imports: Iterable[Import], group: Callable[[str], str] = unit_name) -> list[str]:
    """One line per cycle between groups of modules (units by default; ``str`` for single modules): each strongly
    connected set of two or more, with the imports that make it."""
    edges: dict[str, dict[str, Import]] = defaultdict(dict)
    for i in imports:
        if _internal(i.target) and group(i.module) != group(i.target):
            edges[group(i.module)].setdefault(group(i.target), i)
    found = []
    for component in _strongly_connected(edges):
        if len(component) > 1:
            links = "; ".join(f"{i.path}:{i.line} imports {i.target}"
                              for u in sorted(component) for v, i in sorted(edges[u].items()) if v in component)
            found.append(f"import cycle between {', '.join(sorted(component))}: {links}")
    return found


def _strongly_connected(edges: Mapping[str, Mapping[str, object]]) -> list[set[str]]:
    """Tarjan's algorithm: the strongly connected sets of the graph ``edges`` (node -> its successors)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in edges.get(node, {}):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(set(edges) | {v for targets in edges.values() for v in targets}):
        if node not in index:
            visit(node)
    return components


def _within(module: str, places: frozenset[str]) -> bool:
    """Whether ``module`` is one of ``places`` (names below compassmem: a unit such as ``query_api`` or a module
    such as ``core.tracing``) or inside one."""
    name = module.removeprefix("compassmem.")
    return any(name == place or name.startswith(f"{place}.") for place in places)


def framework_imports(imports: Iterable[Import], frameworks: Mapping[str, frozenset[str]]) -> list[str]:
    found = []
    for i in imports:
        framework = i.target.split(".")[0]
        allowed = frameworks.get(framework)
        if allowed is not None and not _within(i.module, allowed):
            found.append(f"{i.path}:{i.line}: {i.module} imports {i.target}: {framework} belongs to "
                         f"{', '.join(sorted(allowed))} only")
    return found


# -- The real package --------------------------------------------------------------------------------------------


def test_every_unit_has_a_layer() -> None:
    modules = all_modules() | {i.target for i in all_imports() if _internal(i.target)}
    assert unknown_units(modules, LAYERS) == [], "give these a layer in LAYERS"


def test_no_module_imports_from_a_higher_layer() -> None:
    violations = upward_imports(all_imports(), LAYERS)
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_units_import_each_other_in_no_cycle() -> None:
    cycles = import_cycles(all_imports())
    assert not cycles, "\n".join(cycles)


def test_modules_import_each_other_in_no_cycle() -> None:
    """Within a unit too: a lazy import back into a module that imports this one is a cycle all the same."""
    cycles = import_cycles(all_imports(), group=str)
    assert not cycles, "\n".join(cycles)


def test_frameworks_stay_in_their_adapters() -> None:
    violations = framework_imports(all_imports(), FRAMEWORKS)
    assert not violations, "\n".join(violations)


def test_the_read_side_and_the_evaluation_load_no_web_framework() -> None:
    """What the offline evaluation imports (and the read side under it) must not pull in FastAPI, even indirectly."""
    code = ("import sys\n"
            "import compassmem.evaluation.recall\n"
            "import compassmem.evaluation.baselines, compassmem.evaluation.question_shapes\n"
            "import compassmem.retrieval.engine, compassmem.retrieval.listing\n"
            "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"loaded: {done.stdout.strip()}"


def test_only_the_integrations_import_the_integrations() -> None:
    """The optional extra's adapters are a leaf: the rest of the package works without LangGraph and LangChain."""
    importers = sorted({i.path for i in all_imports() if i.target.startswith("compassmem.integrations")
                        and unit_of(i.module) != "integrations"})
    assert importers == []


def test_the_package_imports_without_the_langchain_extra() -> None:
    """With LangGraph and langchain-core missing, the library, the client and the verbs the integrations share
    import (the static checks above keep the frameworks out of every other module), and an integration says which
    extra to install."""
    code = ("import sys\n"
            "sys.modules['langgraph'] = sys.modules['langchain_core'] = None  # import fails as if not installed\n"
            "from compassmem import Client, Memory\n"
            "import compassmem.integrations.verbs\n"
            "for name in ('langgraph', 'langchain'):\n"
            "    try:\n"
            "        __import__(f'compassmem.integrations.{name}')\n"
            "    except ImportError as error:\n"
            "        print(error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "compassmem.integrations.langgraph needs LangGraph: pip install 'compassmem[langchain]'",
        "compassmem.integrations.langchain needs langchain-core: pip install 'compassmem[langchain]'"]


# -- The checks themselves catch what they are for ---------------------------------------------------------------

_FAKE_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bottom", ("core",)), ("middle", ("retrieval", "sinks")), ("top", ("query_api",)))


def _fake(module: str, source: str, *, package: bool = False) -> list[Import]:
    path = module.replace(".", "/") + ("/__init__.py" if package else ".py")
    return list(imports_of(source, module, path, package))


def test_an_upward_import_is_reported_with_its_place_and_layers() -> None:
    imports = _fake("compassmem.core.models",
                    "import json\n\n\ndef later():\n    from compassmem.query_api.app import x\n")

    assert upward_imports(imports, _FAKE_LAYERS) == [
        ("compassmem/core/models.py:5: compassmem.core.models imports compassmem.query_api.app: layer 'bottom' -> "
         "higher layer 'top'")]


def test_relative_and_type_checking_imports_count() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..query_api import app\n"
    imports = _fake("compassmem.retrieval.engine", source)

    assert [i.target for i in imports] == ["typing", "compassmem.query_api"]
    assert len(upward_imports(imports, _FAKE_LAYERS)) == 1


def test_an_import_of_the_integrations_from_below_is_reported_with_the_real_layers() -> None:
    imports = _fake("compassmem.library.memory", "from compassmem.integrations.langgraph import CompassmemStore\n")

    assert upward_imports(imports, LAYERS) == [
        ("compassmem/library/memory.py:1: compassmem.library.memory imports compassmem.integrations.langgraph: layer "
         "'library and tools' -> higher layer 'adapters'")]
    assert framework_imports(_fake("compassmem.library.memory", "import langgraph.store.base\n"), FRAMEWORKS) == [
        "compassmem/library/memory.py:1: compassmem.library.memory imports langgraph.store.base: langgraph belongs to "
        "integrations only"]


def test_a_cycle_within_one_layer_is_reported() -> None:
    imports = [*_fake("compassmem.retrieval.engine", "from compassmem.sinks.graph_store import GraphStore\n"),
               *_fake("compassmem.sinks.graph_store", "\nimport compassmem.retrieval.engine\n")]

    assert upward_imports(imports, _FAKE_LAYERS) == []
    assert import_cycles(imports) == [
        ("import cycle between compassmem.retrieval, compassmem.sinks: compassmem/retrieval/engine.py:1 imports "
         "compassmem.sinks.graph_store; compassmem/sinks/graph_store.py:2 imports compassmem.retrieval.engine")]


def test_a_cycle_between_modules_of_one_unit_is_reported() -> None:
    imports = [*_fake("compassmem.cli.main", "from compassmem.cli.streaming import add\n"),
               *_fake("compassmem.cli.streaming", "def run():\n    from compassmem.cli.main import Progress\n")]

    assert import_cycles(imports) == []
    assert import_cycles(imports, group=str) == [
        ("import cycle between compassmem.cli.main, compassmem.cli.streaming: compassmem/cli/main.py:1 imports "
         "compassmem.cli.streaming; compassmem/cli/streaming.py:2 imports compassmem.cli.main")]


def test_a_unit_without_a_layer_and_a_stray_framework_are_reported() -> None:
    imports = _fake("compassmem.newthing", "import fastapi\nfrom compassmem.core.models import Turn\n")

    assert unknown_units({i.module for i in imports}, _FAKE_LAYERS) == ["compassmem.newthing"]
    # The file does not exist, so its path is not written out whole (test_self_contained checks every path a
    # tracked file names).
    assert framework_imports(imports, {"fastapi": frozenset({"query_api"})}) == [
        f"{PACKAGE_DIR.name}/newthing.py:1: compassmem.newthing imports fastapi: fastapi belongs to query_api only"]


def test_no_module_stands_outside_a_package() -> None:
    """Every module lives in the package of its layer; only the facade (``__init__``) stands at the top."""
    loose = sorted(path.name for path in PACKAGE_DIR.glob("*.py") if path.name not in {"__init__.py", "__main__.py"})
    assert loose == [], "move these into a package"


def test_a_framework_outside_its_module_is_reported() -> None:
    imports = [*_fake("compassmem.core.config", "import opentelemetry.trace\n"),
               *_fake("compassmem.core.tracing", "import opentelemetry.trace\n")]

    assert framework_imports(imports, FRAMEWORKS) == [
        "compassmem/core/config.py:1: compassmem.core.config imports opentelemetry.trace: opentelemetry belongs to "
        "core.tracing, query_api only"]
