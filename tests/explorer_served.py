"""The explorer's API in this process (uvicorn on a thread) over real stores, for the browser tests of its views.

``served_memory`` builds memory with the caller's ``build(memory, stores)`` (``Memory.add``, or records written
straight into the graph store), then serves it with one API key; its health trends are sampled every 0.25 s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.library.memory import Memory
from compassmem.monitoring.memory_health import MemoryHealthMonitor
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "sample_conversation.jsonl"
KEY = "default.explorer-views-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@dataclass
class Served:
    url: str
    stores: Stores
    memory: Memory
    metrics: MemoryMetrics


def sample_turns() -> list[Turn]:
    return [Turn(**json.loads(line)) for line in SAMPLE.read_text().splitlines() if line.strip()]


@contextmanager
def served_memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any,
                  build: Callable[[Memory, Stores], None]) -> Iterator[Served]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("views-qdrant") / "qdrant", embedder.dim)
    stores = Stores(vectors=vectors, graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    settings = Settings(_env_file=None, api_port=0, api_keys=[KEY])  # type: ignore[call-arg]
    try:
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            build(writer, stores)
            metrics = MemoryMetrics(process_collectors=False)
            services = build_services(settings, stores, embedder, metrics)
            services.health = MemoryHealthMonitor(stores, metrics, sample_every_s=0.25, samples=30)
            with BackgroundServer(create_app(services)) as server:
                yield Served(server.url, stores, writer, metrics)
    finally:
        stores.close()


def api_get(served: Served, path: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(f"{served.url}{path}", params={"tenant": "default", **params}, headers=AUTH, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_graph(page: Any, conversation_id: str) -> None:
    page.wait_for_selector(f'#graph[data-conversation="{conversation_id}"]', timeout=60_000)


# The node labels the graph shows, as cytoscape draws them: a label whose text is not transparent, on a node not
# hidden, at least as large on screen as its min-zoomed-font-size; its box as cytoscape bounds it on screen.
_SHOWN_LABELS = """() => {
    const cy = window.compassmemExplorer.graph.cy;
    const zoom = cy.zoom();
    const only = {includeNodes: false, includeEdges: false, includeLabels: true, includeMainLabels: true,
        includeSourceLabels: false, includeTargetLabels: false, includeOverlays: false, includeUnderlays: false};
    return cy.nodes().filter(n => n.style('label') && n.visible() && n.effectiveOpacity() > 0
            && Number(n.style('text-opacity')) > 0
            && n.numericStyle('font-size') * zoom >= n.numericStyle('min-zoomed-font-size'))
        .map(n => ({id: n.id(), kind: n.data('kind'), text: n.style('label'), px: n.numericStyle('font-size') * zoom,
                    box: n.renderedBoundingBox(only)}));
}"""
MIN_LABEL_PX = 11


def settle(page: Any) -> None:
    """Waits until the graph stands still and its labels are placed for where it stands."""
    page.wait_for_function("""() => {
        const graph = window.compassmemExplorer.graph;
        return !graph.cy.animated() && !graph.labelsPending;
    }""", timeout=30_000)


def shown_labels(page: Any) -> list[dict[str, Any]]:
    settle(page)
    return page.evaluate(_SHOWN_LABELS)


def label_faults(page: Any, labels: list[dict[str, Any]]) -> list[str]:
    """What keeps a shown label from being read: under 11 px, (partly) outside the panel, over another label."""
    width, height = page.evaluate("() => [window.compassmemExplorer.graph.cy.width(), "
                                  "window.compassmemExplorer.graph.cy.height()]")
    faults = [f"{label['text']!r} is {label['px']:.1f} px" for label in labels if label["px"] < MIN_LABEL_PX - 0.01]
    for label in labels:
        box = label["box"]
        if box["x1"] < -0.5 or box["y1"] < -0.5 or box["x2"] > width + 0.5 or box["y2"] > height + 0.5:
            faults.append(f"{label['text']!r} is cut off by the panel's edge ({_box(box)} in {width}x{height})")
    for i, first in enumerate(labels):
        for second in labels[i + 1:]:
            a, b = first["box"], second["box"]
            if min(a["x2"], b["x2"]) - max(a["x1"], b["x1"]) > 0.5 and \
                    min(a["y2"], b["y2"]) - max(a["y1"], b["y1"]) > 0.5:
                faults.append(f"{first['text']!r} ({_box(a)}) overlaps {second['text']!r} ({_box(b)})")
    return faults


def _box(box: dict[str, float]) -> str:
    return f"{box['x1']:.0f},{box['y1']:.0f}-{box['x2']:.0f},{box['y2']:.0f}"
