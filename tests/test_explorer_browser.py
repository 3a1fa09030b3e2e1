"""The explorer page in a real browser (Debian's Chromium through Playwright) against a real `compassmem dev`.

Memory: the sample conversation (examples/) and, when the LoCoMo data is available (LOCOMO_DATA, the variable the
benchmarks read; the repository does not ship it), the development conversation conv-26, both posted to
POST /v1/turns and built by the worker. The tenant has an API key, so every request of the page carries it.

Chromium comes from the Debian package (`make tools` installs it): Playwright's own browser download cannot work on
the machines this runs on. Without it these tests fail with the command that installs it; they are never skipped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dev_process import FAST_STREAM_ENV, free_port, running_dev

from compassmem.write.importers import read_turns

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "sample_conversation.jsonl"
SCREENSHOT = REPO / "results" / "explorer.png"
EXPLAIN_SCREENSHOT = REPO / "results" / "explain.png"
DEV_CONVERSATION = "conv-26"
KEY = "explorer-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# The turns of the sample conversation, and one more of a later session, posted while a page is open.
LATE_TURN = {"conversation_id": "priya-tom", "turn_id": "S9:1", "speaker": "Tom",
             "text": "Biscuit learned to fetch the newspaper this morning, what a clever beagle.",
             "timestamp": "2024-05-20T08:00:00+00:00", "session_id": "9"}


def _locomo_turns() -> list[dict[str, Any]]:
    data = os.environ.get("LOCOMO_DATA")
    if not data or not Path(data).is_file():
        return []
    return [t.model_dump(mode="json") for t in read_turns(Path(data)) if t.conversation_id == DEV_CONVERSATION]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`compassmem dev` with the sample conversation (and conv-26 when the data is there) in memory."""
    root = tmp_path_factory.mktemp("explorer-dev")
    env = {**os.environ, **FAST_STREAM_ENV, "COMPASSMEM_DATA_DIR": str(root / "data"),
           "COMPASSMEM_API_PORT": str(free_port()), "COMPASSMEM_DEV_BROKER_PORT": "0",
           "COMPASSMEM_API_KEYS": json.dumps({"default": KEY})}
    sample = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    locomo = _locomo_turns()
    with running_dev(env, root / "dev.log") as url:
        for turns in (sample, locomo):
            if turns:
                response = httpx.post(f"{url}/v1/turns", json=turns, headers=AUTH, timeout=60)
                assert response.status_code == 202, response.text
        expected = {"priya-tom": len(sample), **({DEV_CONVERSATION: len(locomo)} if locomo else {})}
        _wait_until_built(url, expected, root / "dev.log")
        yield {"url": url, "conversations": expected}


def _wait_until_built(url: str, expected: dict[str, int], log: Path, timeout_s: float = 300) -> None:
    """Every turn in an event, and no segment left open (idle segments close after 1 s here)."""
    deadline = time.monotonic() + timeout_s
    built: dict[str, tuple[int, int]] = {}
    while time.monotonic() < deadline:
        page = httpx.get(f"{url}/v1/conversations", headers=AUTH, timeout=30).json()
        built = {c["conversation_id"]: (c["turns"], c["provisional_events"]) for c in page["conversations"]}
        if all(built.get(c) == (n, 0) for c, n in expected.items()):
            return
        time.sleep(1)
    pytest.fail(f"memory not built within {timeout_s:g} s: {built}, expected turns {expected}\n"
                f"{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def dev_conversation(dev: dict[str, Any]) -> str:
    if DEV_CONVERSATION not in dev["conversations"]:
        pytest.skip(f"LoCoMo data not found: set LOCOMO_DATA to a LoCoMo JSON file holding {DEV_CONVERSATION} "
                    "(the repository does not ship it; see docs/benchmarks.md)")
    return DEV_CONVERSATION


@pytest.fixture
def open_page(new_tab: Any, dev: dict[str, Any]) -> Any:
    """``open_page(key=..., conversation=...)``: a tab with the key in its session storage."""

    def opened(key: str | None = KEY, conversation: str | None = None) -> Any:
        return new_tab(f"{dev['url']}/ui/" + (f"#conversation={conversation}" if conversation else ""), key)

    return opened


def _graph(dev: dict[str, Any], conversation_id: str) -> dict[str, Any]:
    response = httpx.get(f"{dev['url']}/v1/conversations/{conversation_id}/graph", params={"max_nodes": 500},
                         headers=AUTH, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _wait_for_graph(page: Any, conversation_id: str) -> None:
    page.wait_for_selector(f'#graph[data-conversation="{conversation_id}"]', timeout=30_000)


def _click_event(page: Any, event_id: str) -> None:
    """A real click on the node's place on the canvas."""
    at = page.evaluate("""(id) => {
        const node = window.compassmemExplorer.graph.cy.getElementById(id);
        const box = document.getElementById('graph').getBoundingClientRect();
        const p = node.renderedPosition();
        return {x: box.left + p.x, y: box.top + p.y};
    }""", event_id)
    page.mouse.click(at["x"], at["y"])


def test_the_list_shows_the_conversations(open_page: Any, dev: dict[str, Any]) -> None:
    page = open_page()
    page.wait_for_selector("#conversation-list [role=option]")
    page.wait_for_function("n => document.querySelectorAll('#conversation-list [role=option]').length === n",
                           arg=len(dev["conversations"]))
    listed = page.eval_on_selector_all("#conversation-list [role=option]", "items => items.map(i => i.dataset.value)")
    api = httpx.get(f"{dev['url']}/v1/conversations", headers=AUTH, timeout=30).json()
    assert listed == [c["conversation_id"] for c in api["conversations"]]
    assert set(listed) == set(dev["conversations"])
    first = page.inner_text("#conversation-list [role=option] >> nth=0")
    assert f"{api['conversations'][0]['events']} events" in first and "turns" in first
    assert not page.js_errors


def test_the_dev_conversation_renders_every_event_the_api_reports(open_page: Any, dev: dict[str, Any],
                                                                  dev_conversation: str) -> None:
    """It opens on its topics and the strongest links between them; "Show all events" draws every event."""
    page = open_page(conversation=dev_conversation)
    _wait_for_graph(page, dev_conversation)
    reported = _graph(dev, dev_conversation)["counts"]["events"]
    first_render_ms = float(page.get_attribute("#graph", "data-first-render-ms"))
    opening = {name: int(page.get_attribute("#graph", f"data-{name}")) for name in ("topics", "events", "edges")}
    print(f"\ntime to first graph render of {dev_conversation} ({reported} events) in Chromium: "
          f"{first_render_ms:.0f} ms from navigation start; opening view: {opening['topics']} topics, "
          f"{opening['events']} events, {opening['edges']} edges drawn")
    assert opening["topics"] >= 1 and opening["events"] < reported
    page.click("#expand-all")
    page.wait_for_function("(n) => Number(document.getElementById('graph').dataset.events) === n", arg=reported,
                           timeout=30_000)
    assert reported > 50
    # Nothing is hidden at 1280x800: after the fit every node lies inside the graph's box.
    outside = page.evaluate("""() => {
        const cy = window.compassmemExplorer.graph.cy;
        return cy.nodes('[kind = "event"]').filter(n => {
            const b = n.renderedBoundingBox({includeLabels: false});
            return b.x1 < 0 || b.y1 < 0 || b.x2 > cy.width() || b.y2 > cy.height();
        }).length;
    }""")
    assert outside == 0
    assert not page.js_errors


def test_clicking_an_event_shows_its_source_turns(open_page: Any, dev: dict[str, Any]) -> None:
    page = open_page(conversation="priya-tom")
    _wait_for_graph(page, "priya-tom")
    event = next(n for n in _graph(dev, "priya-tom")["nodes"] if n["kind"] == "event")
    _click_event(page, event["id"])
    page.wait_for_selector("#detail-turns li")
    shown = page.eval_on_selector_all("#detail-turns li", "items => items.map(i => i.dataset.turnId)")
    assert shown == event["turn_ids"]
    stored = httpx.get(f"{dev['url']}/v1/events/{event['id']}", headers=AUTH, timeout=30).json()
    text = page.inner_text("#detail-turns")
    for turn in stored["observations"]:
        assert turn["speaker"] in text and turn["text"][:40] in text
    assert page.inner_text("#detail-summary") == stored["summary"]
    assert not page.js_errors


def test_asking_highlights_the_evidence_and_lists_the_ranked_turns_in_order(open_page: Any,
                                                                            dev: dict[str, Any]) -> None:
    question = "Why was the Atlas launch moved, and when did it finally launch?"
    page = open_page(conversation="priya-tom")
    _wait_for_graph(page, "priya-tom")
    page.click("#tab-ask")
    page.fill("#question", question)
    page.fill("#budget", "8")
    page.click("#ask-button")
    page.wait_for_selector("#ranked-turns li")
    listed = page.eval_on_selector_all("#ranked-turns li", "items => items.map(i => i.dataset.turnId)")
    answer = httpx.post(f"{dev['url']}/v1/query", headers=AUTH, timeout=30,
                        json={"conversation_id": "priya-tom", "question": question, "budget_turns": 8}).json()
    assert listed == answer["turn_ids"]
    highlighted = page.evaluate("() => window.compassmemExplorer.graph.cy.nodes('.evidence').length")
    assert highlighted >= 1 and int(page.get_attribute("#graph", "data-highlighted")) >= 1
    assert "total" in page.inner_text("#ask-timings")
    assert not page.js_errors


def test_why_this_turn_shows_its_channels_contributions_and_path(open_page: Any, dev: dict[str, Any]) -> None:
    """The Ask panel asks with explain: each ranked turn has a collapsed "why this turn?" that opens on the
    channels with their ranks, the largest feature contributions and the path, as the API explains them. Saves
    results/explain.png (docs/explain.png is one of these)."""
    question = "Why was the Atlas launch moved, and when did it finally launch?"
    page = open_page(conversation="priya-tom")
    _wait_for_graph(page, "priya-tom")
    page.click("#tab-ask")
    page.fill("#question", question)
    page.fill("#budget", "8")
    page.click("#ask-button")
    page.wait_for_selector("#ranked-turns li details.why")
    answer = httpx.post(f"{dev['url']}/v1/query", headers=AUTH, timeout=30,
                        json={"conversation_id": "priya-tom", "question": question, "budget_turns": 8,
                              "explain": True}).json()
    explained = answer["explanation"]["turns"]
    listed = page.eval_on_selector_all("#ranked-turns details.why", "items => items.map(i => i.dataset.turnId)")
    assert listed == answer["turn_ids"] == [t["turn_id"] for t in explained]
    first = explained[0]
    why = page.locator(f'#ranked-turns details.why[data-turn-id="{first["turn_id"]}"]')
    assert why.get_attribute("open") is None and not why.locator(".why-channels").is_visible()
    why.locator("summary").click()
    assert why.get_attribute("open") is not None and why.locator(".why-channels").is_visible()
    channels = why.locator(".why-channels [data-channel]")
    assert channels.evaluate_all("items => items.map(i => i.dataset.channel)") == [c["channel"]
                                                                                  for c in first["channels"]]
    for index, channel in enumerate(first["channels"]):
        assert f"#{channel['rank']}" in channels.nth(index).inner_text()
    shown = why.locator(".why-features tbody tr td:first-child").all_inner_texts()
    assert shown == list(first["contributions"])[:5]
    assert f"score {first['score']:.3f}" in why.inner_text()
    assert why.locator(".why-path").count() == 1
    assert page.locator("#question-why").count() == 1
    why.scroll_into_view_if_needed()
    page.wait_for_timeout(400)  # the zoom onto the path
    EXPLAIN_SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(EXPLAIN_SCREENSHOT))
    print(f"\nscreenshot: {EXPLAIN_SCREENSHOT}")
    assert EXPLAIN_SCREENSHOT.stat().st_size > 10_000
    assert not page.js_errors


def test_a_turn_posted_while_the_page_is_open_appears_within_3_s(open_page: Any, dev: dict[str, Any]) -> None:
    page = open_page(conversation="priya-tom")
    _wait_for_graph(page, "priya-tom")
    page.wait_for_selector('#live-state[data-state="on"]')
    started = time.monotonic()
    response = httpx.post(f"{dev['url']}/v1/turns", json=LATE_TURN, headers=AUTH, timeout=30)
    assert response.status_code == 202, response.text
    page.wait_for_function("""(turn) => window.compassmemExplorer.graph.cy.nodes('[kind = "event"]')
        .some(n => (n.data('turnIds') || []).includes(turn))""", arg=LATE_TURN["turn_id"], timeout=3000)
    print(f"\nposted turn on the open page after {time.monotonic() - started:.2f} s")
    assert not page.js_errors


@pytest.mark.parametrize(("key", "expected"), [("not-the-key", "refused the key"), ("", "needs an API key")])
def test_a_wrong_or_missing_key_shows_the_refusal(open_page: Any, key: str, expected: str) -> None:
    page = open_page(key=key)
    page.wait_for_selector("#alert:not([hidden])")
    assert expected in page.inner_text("#alert-text")
    assert page.is_visible("#alert-action")


def test_the_keyboard_opens_a_conversation_and_walks_its_events(open_page: Any) -> None:
    page = open_page()
    page.wait_for_selector("#conversation-list [role=option]")
    page.focus("#conversation-list")
    names = page.eval_on_selector_all("#conversation-list [role=option]", "items => items.map(i => i.dataset.value)")
    for _ in range(names.index("priya-tom") + 1):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    _wait_for_graph(page, "priya-tom")
    page.focus("#tab-detail")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-events", "aria-selected") == "true"
    # The Events tab loads its page of events from the API: the keys act on the list once it is there.
    page.wait_for_function("() => document.querySelectorAll('#event-list [role=option]').length >= 2")
    page.focus("#event-list")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_selector("#detail-turns li")
    assert page.get_attribute("#tab-detail", "aria-selected") == "true"


def test_a_screenshot_of_an_evidence_path(open_page: Any, dev: dict[str, Any]) -> None:
    """results/explorer.png (docs/explorer.png is one of these): the dev conversation when there, with a question
    whose evidence was reached through relations."""
    conversation = DEV_CONVERSATION if DEV_CONVERSATION in dev["conversations"] else "priya-tom"
    question = ("When did Caroline go to the LGBTQ support group, and what did she take away from it?"
                if conversation == DEV_CONVERSATION else "Why was the Atlas launch moved, and when did it launch?")
    page = open_page(conversation=conversation)
    _wait_for_graph(page, conversation)
    page.click("#tab-ask")
    page.fill("#question", question)
    page.click("#ask-button")
    page.wait_for_selector("#ranked-turns li")
    page.wait_for_timeout(400)  # the zoom onto the path
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT))
    print(f"\nscreenshot: {SCREENSHOT}")
    assert SCREENSHOT.stat().st_size > 10_000


def test_the_health_tab_shows_the_memory_and_the_worker_of_compassmem_dev(open_page: Any, dev: dict[str, Any]) -> None:
    """In `compassmem dev` the API and the worker share their metrics: the Health tab shows the worker's figures
    beside each conversation's, as GET /v1/health/memory gives them."""
    page = open_page(conversation="priya-tom")
    _wait_for_graph(page, "priya-tom")
    page.click("#tab-health")
    page.wait_for_selector('#health-conversations [data-conversation="priya-tom"]')
    report = httpx.get(f"{dev['url']}/v1/health/memory", headers=AUTH, timeout=30).json()
    assert report["worker"]["in_process"] and report["worker"]["lag_records"] is not None
    page.wait_for_selector('#health-worker [data-figure="lag_records"]')
    card = page.locator('#health-conversations [data-conversation="priya-tom"]')
    shown = next(c for c in report["conversations"] if c["conversation_id"] == "priya-tom")
    assert card.locator('[data-figure="relations"] .value').inner_text() == f"{shown['relations']:,}"
    assert card.locator('[data-figure="average_degree"] .value').inner_text() == f"{shown['average_degree']:.2f}"
    assert not page.js_errors
