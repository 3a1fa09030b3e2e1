"""Every view of the explorer can be read at 1400x900 and at 1024x768, measured in a real browser (Debian's Chromium
through Playwright) against a real API over real stores.

In each view (a conversation opened on its topics, after Ask, the timeline, a topic expanded, a short conversation)
the node labels shown are measured as cytoscape draws them: none under 11 px on screen, none cut off by the panel,
none over another; the topic names are all shown when a conversation opens, the lanes of the timeline do not overlap
and each is named, the topic bar shows every chip whole. A short conversation opens on its events named (it opened
on five unlabelled grey dots), a tooltip has an opaque ground, stays in the panel and follows its node when the panel
is resized, and the list's counts and its "live" badge follow a conversation being written within seconds (they
stayed as first read until a reload).

Memory: the sample conversation (``priya-tom``, five events, no topic yet) and ``synthetic-chat`` (800 synthetic
turns, seven topics) built by ``Memory.add``; and LoCoMo's conv-26 when LOCOMO_DATA names the LoCoMo file. Each view
of ``synthetic-chat`` and the short conversation at both sizes is saved into docs/ (explorer-<view>-<size>.png).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from explorer_served import (KEY, REPO, Served, api_get, label_faults, sample_turns, served_memory, settle,
                             shown_labels, wait_for_graph)
from PIL import Image
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from synthetic_graph import synthetic_turns

from compassmem.library.memory import Memory
from compassmem.sinks.factory import Stores
from compassmem.write.importers import read_turns

DOCS = REPO / "docs"
SMALL, CHAT, LOCOMO = "priya-tom", "synthetic-chat", "conv-26"
SIZES = [(1400, 900), (1024, 768)]
QUESTIONS = {CHAT: "What did they name the puppy from the shelter?",
             LOCOMO: "When did Caroline go to the LGBTQ support group?"}
# The list is read again every 3 s, and "live" lasts 10 s after the turns last grew (conversations.js).
LIST_CURRENT_S = 8
LIVE_GONE_S = 25


def _build(writer: Memory, stores: Stores) -> None:
    writer.add(sample_turns())
    writer.add(synthetic_turns(CHAT, 100))
    data = os.environ.get("LOCOMO_DATA")
    if data and Path(data).is_file():
        writer.add([t for t in read_turns(Path(data)) if t.conversation_id == LOCOMO])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any) -> Iterator[Served]:
    with served_memory(tmp_path_factory, embedder, embedded_falkordb, _build) as running:
        yield running


@pytest.fixture
def open_page(new_tab: Any, served: Served) -> Any:
    """``open_page(conversation, size)``: a tab of that size with the key in its session storage, on the
    conversation (or on the list alone)."""
    def opened(conversation: str | None, size: tuple[int, int]) -> Any:
        page = new_tab(f"{served.url}/ui/" + (f"#conversation={conversation}" if conversation else ""), KEY, size)
        if conversation:
            wait_for_graph(page, conversation)
        return page
    return opened


def _readable(page: Any, view: str) -> list[dict[str, Any]]:
    """The labels shown, after checking that each can be read."""
    labels = shown_labels(page)
    assert label_faults(page, labels) == [], f"{view}: {label_faults(page, labels)}"
    return labels


def _topic_bar_whole(page: Any) -> None:
    """Every topic chip whole: none past the bar's sides, none cut by its bottom edge (lines beyond it scroll)."""
    cut = page.evaluate("""() => {
        const bar = document.getElementById('topic-bar').getBoundingClientRect();
        return [...document.querySelectorAll('#topic-bar .topic-chip')]
            .filter(chip => { const box = chip.getBoundingClientRect();
                              return box.right > bar.right + 0.5 || box.left < bar.left - 0.5
                                  || chip.scrollWidth > chip.clientWidth + 1
                                  || (box.top < bar.bottom - 0.5 && box.bottom > bar.bottom + 0.5); })
            .map(chip => chip.textContent);
    }""")
    assert cut == [], f"topic chips cut off: {cut}"


def _screenshot(page: Any, view: str, size: tuple[int, int]) -> None:
    """The view saved into docs/ as explorer-<view>-<width>x<height>.png, in 256 colours (a fifth of the size, the
    same to the eye)."""
    settle(page)
    path = DOCS / f"explorer-{view}-{size[0]}x{size[1]}.png"
    page.screenshot(path=str(path))
    Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    print(f"\nscreenshot {path.relative_to(REPO)} ({path.stat().st_size // 1024} KiB)")


def _conversations(served: Served) -> list[str]:
    listed = {c["conversation_id"] for c in api_get(served, "/v1/conversations")["conversations"]}
    return [c for c in (CHAT, LOCOMO) if c in listed]


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_every_view_of_a_conversation_with_topics_can_be_read(open_page: Any, served: Served,
                                                              size: tuple[int, int]) -> None:
    for conversation in _conversations(served):
        saved = conversation == CHAT
        overview = api_get(served, f"/v1/conversations/{conversation}/overview")
        topics = {t["id"] for t in overview["topics"] if t["id"] is not None}
        page = open_page(conversation, size)

        # Opened on its topics: every topic named, the topic bar whole.
        labels = _readable(page, f"{conversation} opened")
        assert {label["id"] for label in labels if label["kind"] == "topic"} == topics
        _topic_bar_whole(page)
        if saved:
            _screenshot(page, "overview", size)

        # After Ask: the answer's events named, whatever else gives way.
        page.click("#tab-ask")
        page.fill("#question", QUESTIONS[conversation])
        page.click("#ask-button")
        page.wait_for_selector("#ranked-turns li", timeout=60_000)
        page.wait_for_function("() => Number(document.getElementById('graph').dataset.highlighted) > 0")
        labels = _readable(page, f"{conversation} after Ask")
        highlighted = page.evaluate("() => window.compassmemExplorer.graph.cy.nodes('.seed, .evidence')"
                                    ".map(n => n.id())")
        assert {label["id"] for label in labels} & set(highlighted)
        if saved:
            _screenshot(page, "ask", size)
        page.click("#clear-highlight")

        # The timeline: every lane named on its left, the lanes apart, the dates readable.
        page.select_option("#layout", "timeline")
        page.wait_for_function("() => window.compassmemExplorer.graph.cy.nodes('[kind = \"lane-label\"]').length > 0")
        labels = _readable(page, f"{conversation} timeline")
        lanes = page.evaluate("() => window.compassmemExplorer.graph.cy.nodes('[kind = \"lane-label\"]')"
                              ".map(n => n.id())")
        assert {label["id"] for label in labels} >= set(lanes)
        assert any(label["kind"] == "axis" for label in labels)
        if saved:
            _screenshot(page, "timeline", size)
        page.click("#expand-all")
        page.wait_for_function("() => window.compassmemExplorer.graph.cy.nodes('[kind = \"topic\"]').length === 0")
        _readable(page, f"{conversation} timeline, every topic's events")
        boxes = page.evaluate("""() => window.compassmemExplorer.graph.cy.nodes('[kind = "lane"]')
            .map(n => n.renderedBoundingBox({includeLabels: false, includeOverlays: false}))""")
        assert len(boxes) == len(lanes)
        boxes.sort(key=lambda box: box["y1"])
        assert all(upper["y2"] <= lower["y1"] for upper, lower in zip(boxes, boxes[1:], strict=False)), boxes

        # One topic expanded, on the force layout.
        page.click("#collapse-all")
        page.select_option("#layout", "force")
        biggest = max((t for t in overview["topics"] if t["id"] is not None), key=lambda t: t["events"])
        page.click(f'#topic-bar .topic-chip[data-topic="{biggest["id"]}"]')
        page.wait_for_function("(id) => window.compassmemExplorer.graph.cy.getElementById(id).empty() && "
                               "window.compassmemExplorer.graph.cy.nodes('[kind = \"event\"]').length > 0",
                               arg=biggest["id"])
        _readable(page, f"{conversation} with a topic expanded")
        if saved:
            _screenshot(page, "topic", size)
        assert not page.js_errors


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_a_short_conversation_opens_on_its_events_named(open_page: Any, served: Served,
                                                        size: tuple[int, int]) -> None:
    events = [e for e in api_get(served, f"/v1/conversations/{SMALL}/events")["events"]]
    assert 0 < len(events) <= 12
    page = open_page(SMALL, size)
    labels = _readable(page, f"{SMALL} opened")
    named = {label["id"] for label in labels if label["kind"] == "event"}
    assert named == {e["id"] for e in events}, f"{len(named)} of {len(events)} events named"
    _screenshot(page, "small", size)
    assert not page.js_errors


def _hover_corner_node(page: Any) -> dict[str, Any]:
    """Points at the event node nearest the panel's bottom right corner (its tooltip must turn to stay inside)
    until its tooltip shows. The node is looked up again before each try: on a loaded machine a redraw can move
    it between the lookup and the pointer's arrival."""
    for _ in range(5):
        settle(page)
        node = page.evaluate("""() => {
            const cy = window.compassmemExplorer.graph.cy;
            const box = document.getElementById('graph').getBoundingClientRect();
            const n = cy.nodes('[kind = "event"]').max(n => n.renderedPosition('x') + n.renderedPosition('y')).ele;
            return {x: box.left + n.renderedPosition('x'), y: box.top + n.renderedPosition('y'),
                    full: n.data('full')};
        }""")
        page.mouse.move(node["x"] - 6, node["y"] - 6)
        page.mouse.move(node["x"], node["y"], steps=4)
        try:
            page.wait_for_selector("#graph-tooltip:not([hidden])", timeout=5_000)
            return node
        except PlaywrightTimeout:
            page.mouse.move(2, 2)
    raise AssertionError("no tooltip after pointing at the corner node five times")


def test_a_tooltip_has_an_opaque_ground_and_stays_in_the_panel(open_page: Any, served: Served) -> None:
    page = open_page(SMALL, SIZES[1])
    node = _hover_corner_node(page)
    tip = page.evaluate("""() => {
        const tip = document.getElementById('graph-tooltip');
        const box = tip.getBoundingClientRect();
        const panel = document.querySelector('.graph-panel').getBoundingClientRect();
        return {text: tip.textContent, ground: getComputedStyle(tip).backgroundColor,
                inside: box.left >= panel.left && box.top >= panel.top && box.right <= panel.right
                        && box.bottom <= panel.bottom};
    }""")
    assert tip["text"] == node["full"]
    assert tip["ground"] == "rgb(255, 255, 255)"
    assert tip["inside"]
    # The panel resized under a still pointer (the bars above it growing, the window made smaller): the view is
    # fitted again and the tooltip follows its node there (it was hidden, and stayed hidden until the pointer left).
    page.set_viewport_size({"width": SIZES[1][0] - 60, "height": SIZES[1][1] - 60})
    page.wait_for_function("""(full) => {
        const graph = window.compassmemExplorer.graph;
        const tip = document.getElementById('graph-tooltip');
        if (graph.cy.animated() || tip.hidden || tip.textContent !== full) return false;
        const node = graph.cy.nodes('[kind = "event"]').filter(n => n.data('full') === full)[0];
        const frame = document.getElementById('graph').getBoundingClientRect();
        const box = tip.getBoundingClientRect();
        const x = frame.left + node.renderedPosition('x'), y = frame.top + node.renderedPosition('y');
        return Math.max(box.left - x, 0, x - box.right) < 40 && Math.max(box.top - y, 0, y - box.bottom) < 40;
    }""", arg=node["full"], timeout=10_000)
    page.set_viewport_size({"width": SIZES[1][0], "height": SIZES[1][1]})
    # Off the node, on the empty canvas; then off the graph altogether.
    corner = page.evaluate("() => { const box = document.getElementById('graph').getBoundingClientRect();"
                           " return [box.left + 3, box.top + 3]; }")
    page.mouse.move(*corner)
    page.wait_for_selector("#graph-tooltip[hidden]", state="attached")
    _hover_corner_node(page)
    page.mouse.move(2, 2)
    page.wait_for_selector("#graph-tooltip[hidden]", state="attached")


def test_the_list_counts_and_live_badge_follow_a_conversation_being_written(open_page: Any,
                                                                           served: Served) -> None:
    page = open_page(None, SIZES[0])
    page.wait_for_selector(f'#conversation-list [data-value="{SMALL}"]')
    turns = synthetic_turns("streamed-chat", 6)
    for part in (turns[:16], turns[16:32], turns[32:]):
        served.memory.add(part)
        listed = next(c for c in api_get(served, "/v1/conversations")["conversations"]
                      if c["conversation_id"] == "streamed-chat")
        started = time.monotonic()
        page.wait_for_function("""([turns, events]) => {
            const item = document.querySelector('#conversation-list [data-value="streamed-chat"]');
            return item && item.dataset.turns === String(turns) && item.dataset.events === String(events)
                && item.querySelector('.badge')?.textContent === 'live';
        }""", arg=[listed["turns"], listed["events"]], timeout=LIST_CURRENT_S * 1000)
        print(f"\nlist showed {listed['turns']} turns, {listed['events']} events and 'live' after "
              f"{time.monotonic() - started:.1f} s")
    started = time.monotonic()
    page.wait_for_function("""() => !document.querySelector('#conversation-list [data-value="streamed-chat"] .badge')""",
                           timeout=LIVE_GONE_S * 1000)
    print(f"'live' gone {time.monotonic() - started:.1f} s after the last turns")
    assert not page.js_errors
