// The explorer page: wires the panels to the API and to each other.
//
// A conversation opens on its overview (GET .../overview: its topics and the strongest links between them, for the
// relation types and minimum confidence chosen), never on its thousands of relations; a topic's events, an event's
// relations and an answer's evidence are fetched when asked for (GET .../graph?topic=&event=). What is shown is kept
// in the URL's hash (url-state.js), so a reload or a shared link opens the same view.

import { Api } from "./api.js";
import { evidencePath, renderAnswer } from "./ask.js";
import { ConversationList } from "./conversations.js";
import { renderDetail } from "./detail.js";
import { clear, h } from "./dom.js";
import { NO_TOPIC_COLOR, RELATION_TYPES, formatDateTime, plural, topicColor } from "./format.js";
import { GraphModel, NO_TOPIC } from "./graph-model.js";
import { GraphView } from "./graph-view.js";
import { HealthPanel } from "./health.js";
import { Listbox } from "./listbox.js";
import { LiveStream } from "./live.js";
import { askCredentials, savedCredentials } from "./session.js";
import { Tabs } from "./tabs.js";
import { ALL_TYPES, LINK_CHOICES, defaultView, hashOf, readHash } from "./url-state.js";

// The events without a topic yet (the most recent ones, a short conversation's all) open shown one by one up to this
// many; beyond it they are one group like a topic.
const SHOW_UNCLUSTERED_UP_TO = 40;
const READY_WAIT_MS = 1000;
const EVENT_PAGE = 100;
const FOCUS_MAX = 100; // events per GET .../graph?event= (the API's limit)
const TOPICS_PER_REQUEST = 50; // topics per GET .../graph?topic= (the API's limit)

const $ = (id) => document.getElementById(id);
const graphElement = $("graph");

const state = {
  api: null,
  conversations: null,
  conversationId: null,
  model: null,
  live: null,
  pending: [], // live changes that arrived before the overview did
  view: defaultView(), // what the hash says: filters, expanded topics, the selected event, the layout
  revealed: new Set(), // events drawn one by one whatever their topic: just arrived, an answer's path
  focusNeighbours: new Set(), // the selected event's neighbours
  highlight: null,
  evidenceTurns: new Set(),
  eventsCursor: null,
  lastHash: "",
  loads: 0, // bumped per conversation opened: a late answer for another one is dropped
  firstRender: true,
};

const tabs = new Tabs(document.querySelector(".tabs"), { onShow: (id) => health.shown(id === "tab-health") });
const graph = new GraphView(graphElement, {
  onSelect: (id) => (id ? selectEvent(id, { showPanel: true }) : deselect()),
  onTopic: (key) => toggleTopic(key, true),
});
const eventList = new Listbox($("event-list"), { onSelect: (id, { open }) => selectEvent(id, { showPanel: open }) });
const health = new HealthPanel($("health"), { onOpen: (id) => openConversation(id), onError: (e) => reportError(e) });
window.compassmemExplorer = { graph, state }; // for debugging from the console (and the browser tests)

// -- alerts --------------------------------------------------------------------------------------------------------

function showAlert(message, { kind = "error", action = null } = {}) {
  const alert = $("alert");
  alert.dataset.kind = kind;
  $("alert-text").textContent = message;
  const button = $("alert-action");
  button.hidden = !action;
  if (action) {
    button.textContent = action.label;
    button.onclick = action.run;
  }
  alert.hidden = false;
}

function hideAlert() {
  $("alert").hidden = true;
}

function reportError(error) {
  if (error.name === "AbortError") return;
  if (error.refused) showAlert(error.message, { action: { label: "Enter tenant and key", run: () => changeCredentials() } });
  else if (error.kind === "unreachable") showAlert(error.message, { action: { label: "Retry", run: () => retry() } });
  else showAlert(error.message ?? String(error));
}

function retry() {
  hideAlert();
  state.conversations.reload();
  if (state.conversationId) openConversation(state.conversationId, state.view);
}

// -- connection ----------------------------------------------------------------------------------------------------

async function changeCredentials(reason = "") {
  connect(await askCredentials(reason));
}

function connect(credentials) {
  hideAlert();
  state.api = new Api(credentials);
  health.api = state.api;
  $("connection").textContent = `tenant ${credentials.tenant} · ${credentials.key ? "API key set" : "no API key"}`;
  state.conversations = state.conversations ?? new ConversationList(state.api, { onOpen: (id) => openConversation(id),
    onError: reportError });
  state.conversations.api = state.api;
  state.conversations.reload();
  health.refresh();
  const linked = readHash();
  if (linked.conversation) openConversation(linked.conversation, linked, { linked: true });
  else if (state.conversationId) openConversation(state.conversationId, state.view);
}

// -- the view in the URL -------------------------------------------------------------------------------------------

function setHash() {
  state.view.conversation = state.conversationId;
  state.lastHash = hashOf(state.view);
  if (window.location.hash !== state.lastHash) history.replaceState(null, "", state.lastHash);
}

/** A hash changed by the reader (typed, pasted, back button): open what it names. */
function followHash() {
  if (window.location.hash === state.lastHash || !state.api) return;
  const linked = readHash();
  if (linked.conversation && linked.conversation !== state.conversationId) {
    openConversation(linked.conversation, linked, { linked: true });
    return;
  }
  const reloadOverview = [...linked.types].join() !== [...state.view.types].join() ||
    linked.minConfidence !== state.view.minConfidence || linked.links !== state.view.links;
  state.view = { ...linked, conversation: state.conversationId };
  syncControls();
  if (!state.model) return;
  refresh({ overview: reloadOverview, relayout: true });
  if (linked.event) selectEvent(linked.event, { showPanel: true });
}

// -- a conversation ------------------------------------------------------------------------------------------------

/** Opens a conversation; `view` (a hash's) gives its filters, expanded topics and selected event, else the filters
 * stay as they are and it opens on its topics. */
function openConversation(id, view = null, { linked = false } = {}) {
  state.live?.stop();
  const loads = ++state.loads;
  const next = view ? { ...view } : { ...state.view, topics: new Set(), event: null };
  Object.assign(state, { conversationId: id, model: null, pending: [], view: next, revealed: new Set(),
    focusNeighbours: new Set(), highlight: null, evidenceTurns: new Set(), eventsCursor: null });
  state.openedFromLink = linked && view?.topics?.size > 0;
  state.conversations.markOpen(id);
  setHash();
  syncControls();
  $("graph-title").textContent = id;
  $("graph-status").textContent = "Loading…";
  $("graph-empty").hidden = true;
  $("clear-highlight").hidden = true;
  clear($("topic-bar"));
  clear($("event-list"));
  clear($("ask-result"));
  clear($("panel-detail")).append(h("p", { class: "hint" }, "Click an event in the graph (or pick one in the " +
    "Events tab) to see its summary, source turns, time anchors, relations and merge history. Click a topic to " +
    "show its events."));
  let readyNow;
  const ready = new Promise((resolve) => { readyNow = resolve; });
  let loaded = false;
  state.live = new LiveStream(state.api, id, {
    ready: () => {
      readyNow();
      if (loaded && state.loads === loads) refresh({ overview: true, topics: true, quiet: true }); // ready late
    },
    change: (change) => (state.model?.overview ? applyChange(change) : state.pending.push(change)),
    state: (name, text, why = "") => {
      Object.assign($("live-state"), { textContent: text, title: why });
      $("live-state").dataset.state = name;
    },
    refused: reportError,
  });
  state.live.run();
  Promise.race([ready, new Promise((resolve) => setTimeout(resolve, READY_WAIT_MS))]).then(() => {
    loaded = true;
    if (state.loads === loads) loadConversation(id, loads);
  });
}

async function loadConversation(id, loads) {
  const model = new GraphModel(id);
  try {
    model.setOverview(await fetchOverview(id));
  } catch (error) {
    if (state.loads !== loads) return;
    $("graph-status").textContent = "";
    if (error.kind === "not-found") {
      graph.cy.elements().remove();
      $("graph-empty").hidden = false;
      $("graph-empty").textContent = `No memory for “${id}” yet.`;
    }
    reportError(error);
    return;
  }
  if (state.loads !== loads) return;
  const unclustered = model.topics.get(NO_TOPIC);
  if (!state.openedFromLink && unclustered && unclustered.events <= SHOW_UNCLUSTERED_UP_TO) {
    state.view.topics.add(NO_TOPIC);
  }
  state.model = model;
  try {
    await loadTopics([...state.view.topics]);
    if (state.view.event) await loadFocus([state.view.event]);
  } catch (error) {
    reportError(error);
  }
  if (state.loads !== loads) return;
  for (const change of state.pending.splice(0)) applyToModel(change);
  if (state.view.event) state.focusNeighbours = neighbours(state.view.event);
  setHash();
  render(true);
  if (state.firstRender) {
    state.firstRender = false;
    graphElement.dataset.firstRenderMs = performance.now().toFixed(0);
  }
  graphElement.dataset.conversation = id;
  loadEventList(true);
  if (state.view.event) selectEvent(state.view.event, { showPanel: true });
}

function fetchOverview(id) {
  const types = ALL_TYPES.filter((type) => state.view.types.has(type));
  return state.api.get(`/v1/conversations/${encodeURIComponent(id)}/overview`, {
    types: types.length ? types : ["causal"], min_confidence: state.view.minConfidence, links: state.view.links });
}

/** The events of these topics (and everything around them), those not loaded yet unless `again`. */
async function loadTopics(keys, { again = false } = {}) {
  const model = state.model;
  const wanted = keys.filter((key) => again || !model.loadedTopics.has(key));
  const ids = wanted.filter((key) => key !== NO_TOPIC && model.topics.has(key));
  const unclustered = wanted.includes(NO_TOPIC) && model.topics.has(NO_TOPIC);
  const requests = [];
  for (let start = 0; start < ids.length || (unclustered && start === 0); start += TOPICS_PER_REQUEST) {
    requests.push(fetchGraph({ topic: ids.slice(start, start + TOPICS_PER_REQUEST),
      unclustered: unclustered && start === 0 ? "true" : null, max_nodes: $("max-nodes").value,
      since: $("since").value ? new Date($("since").value).toISOString() : null }));
  }
  for (const part of await Promise.all(requests)) if (state.model === model) model.merge(part);
  for (const key of wanted) model.loadedTopics.add(key);
}

/** These events with every relation they have and the events at the other ends. */
async function loadFocus(ids) {
  const model = state.model;
  for (let start = 0; start < ids.length; start += FOCUS_MAX) {
    const part = await fetchGraph({ event: ids.slice(start, start + FOCUS_MAX) });
    if (state.model === model) model.merge(part);
  }
}

function fetchGraph(params) {
  return state.api.get(`/v1/conversations/${encodeURIComponent(state.conversationId)}/graph`, params);
}

/** Reads again what the page shows: the overview (filters changed, topics changed), the expanded topics. */
async function refresh({ overview = false, topics = false, quiet = false, relayout = false } = {}) {
  const model = state.model;
  if (!model) return;
  try {
    if (overview) model.setOverview(await fetchOverview(state.conversationId));
    if (state.model !== model) return;
    await loadTopics([...state.view.topics], { again: topics });
    if (state.view.event && topics) await loadFocus([state.view.event]);
  } catch (error) {
    if (!quiet) reportError(error);
    return;
  }
  if (state.model !== model) return;
  render(relayout);
  if (topics) loadEventList(true);
}

function graphView() {
  const from = $("time-from").value ? Date.parse(`${$("time-from").value}T00:00:00`) : null;
  const to = $("time-to").value ? Date.parse(`${$("time-to").value}T23:59:59.999`) : null;
  return { expanded: state.view.topics, revealed: state.revealed, focus: state.view.event,
    focusNeighbours: state.focusNeighbours, types: state.view.types, minConfidence: state.view.minConfidence,
    showSuperseded: $("show-superseded").checked, from, to, timeline: state.view.layout === "timeline",
    highlight: state.highlight };
}

function render(relayout) {
  if (!state.model) return;
  // The bars above the graph first: the graph's panel has its final size when it is laid out.
  renderTopicBar();
  renderRelationCounts();
  graph.render(state.model, graphView(), { relayout });
  if (state.view.event) graph.select(state.view.event, { center: false });
  const drawn = graph.lastRender;
  Object.assign(graphElement.dataset, { events: String(drawn.events), topics: String(drawn.topics),
    edges: String(drawn.edges), renderMs: drawn.ms.toFixed(1), zoom: drawn.zoom.toFixed(2),
    laidOut: `${drawn.width}x${drawn.height}`,
    highlighted: String(graph.cy.nodes(".evidence, .seed").length) });
  updateStatus();
}

function updateStatus() {
  const totals = state.model.totals();
  const drawn = graph.lastRender;
  const overview = state.model.overview;
  const passing = overview ? ` (${overview.counts.passing_relations.toLocaleString()} pass the filters)` : "";
  const status = `${plural(totals.events, "event")} · ${plural(totals.relations, "relation")}` +
    `${passing} · ${plural(totals.topics, "topic")} — drawn: ${plural(drawn.topics, "topic")}, ` +
    `${plural(drawn.events, "event")}, ${plural(drawn.edges, "edge")}`;
  Object.assign($("graph-status"), { textContent: status, title: status });
}

function renderTopicBar() {
  const order = state.model.topicOrder();
  const bar = $("topic-bar");
  clear(bar).append(h("span", { class: "topic-bar-label" }, "Topics"),
    ...[...state.model.topics.values()].map((topic) => {
      const expanded = state.view.topics.has(topic.key);
      const color = topic.key === NO_TOPIC ? NO_TOPIC_COLOR : topicColor(order.get(topic.key));
      return h("button", { type: "button", class: "topic-chip", "aria-pressed": String(expanded),
        dataset: { topic: topic.key }, title: `${topic.keywords?.join(", ") || topic.label}: ${topic.events} events` +
          (expanded ? " (press to show as one node)" : " (press to show its events)"),
        onclick: () => toggleTopic(topic.key, !expanded) },
      h("span", { class: "dot", style: `background:${color}` }), `${topic.label} `, h("small", {}, String(topic.events)));
    }));
}

async function toggleTopic(key, expand) {
  if (!state.model) return;
  if (expand) {
    state.view.topics.add(key);
    setHash();
    $("graph-status").textContent = "Loading the topic’s events…";
    try {
      await loadTopics([key]);
    } catch (error) {
      reportError(error);
    }
  } else {
    state.view.topics.delete(key);
    setHash();
  }
  render(state.view.layout === "force");
  loadEventList(true);
}

async function setAllTopics(expand) {
  if (!state.model) return;
  state.view.topics = expand ? new Set(state.model.topics.keys()) : new Set();
  if (!expand) {
    state.revealed.clear();
    clearHighlight(false);
  }
  setHash();
  if (expand) {
    $("graph-status").textContent = "Loading every topic’s events…";
    try {
      await loadTopics([...state.view.topics]);
    } catch (error) {
      reportError(error);
    }
  }
  render(true);
}

// -- the Events tab: the conversation's events in time order, page by page -----------------------------------------

async function loadEventList(fresh) {
  const id = state.conversationId;
  if (!id) return;
  try {
    const page = await state.api.get(`/v1/conversations/${encodeURIComponent(id)}/events`, { limit: EVENT_PAGE,
      cursor: fresh ? null : state.eventsCursor });
    if (state.conversationId !== id) return;
    const list = $("event-list");
    if (fresh) clear(list);
    list.append(...page.events.map((event) => h("li", {
      role: "option", id: `event-${event.id}`, "aria-selected": String(event.id === state.view.event),
      dataset: { value: event.id }, class: state.highlight?.evidence.has(event.id) ? "evidence" : null },
    h("div", { class: "title" }, event.label, " ", event.provisional && h("span", { class: "badge" }, "provisional")),
    h("div", { class: "meta" }, `${formatDateTime(event.start)} · ${plural(event.turn_ids.length, "turn")}`))));
    state.eventsCursor = page.next_cursor;
    $("more-events").hidden = !page.next_cursor;
    if (state.view.event) eventList.highlightValue(state.view.event);
  } catch (error) {
    if (error.kind !== "not-found") reportError(error);
  }
}

// -- live changes --------------------------------------------------------------------------------------------------

let rerender = null;
let overviewAgain = null;

function applyToModel(change) {
  const model = state.model;
  if (change.op === "forget") {
    model.clear();
    showAlert(`The conversation “${state.conversationId}” was forgotten.`, { kind: "info" });
    return [];
  }
  if (change.op === "delete") {
    model.removeEvent(change.removed);
    return [];
  }
  if (change.edge) model.upsertEdge(change.edge);
  if (change.node?.kind === "cluster") {
    model.upsertNode(change.node);
    return [];
  }
  if (change.node) {
    model.upsertNode(change.node);
    // What arrives is drawn one by one (marked fresh), whatever its topic shows as.
    state.revealed.add(change.node.id);
    return [change.node.id];
  }
  return [];
}

function applyChange(change) {
  const changed = applyToModel(change);
  graph.markFresh(changed);
  // Changes come in bursts (a batch writes events, then relations): draw once per burst.
  clearTimeout(rerender);
  rerender = setTimeout(() => {
    render(false);
    if (state.view.event && changed.includes(state.view.event)) selectEvent(state.view.event, { showPanel: false });
  }, 60);
  // Topic counts and links: the overview again once the burst is over.
  clearTimeout(overviewAgain);
  overviewAgain = setTimeout(() => {
    refresh({ overview: true, quiet: true });
    state.conversations.refresh();
  }, 1500);
}

// -- selection and detail ------------------------------------------------------------------------------------------

function neighbours(id) {
  const found = new Set();
  for (const edge of state.model.relationsOf(id)) {
    const other = edge.source === id ? edge.target : edge.source;
    if (state.model.events.has(other)) found.add(other);
  }
  return found;
}

async function selectEvent(id, { showPanel }) {
  if (!state.model) return;
  state.view.event = id;
  setHash();
  eventList.highlightValue(id);
  if (showPanel) tabs.show("tab-detail");
  const panel = $("panel-detail");
  const model = state.model;
  try {
    const [event] = await Promise.all([state.api.get(`/v1/events/${encodeURIComponent(id)}`), loadFocus([id])]);
    if (state.view.event !== id || state.model !== model) return;
    state.focusNeighbours = neighbours(id);
    render(false);
    graph.select(id);
    renderDetail(panel, { event, model, evidenceTurns: state.evidenceTurns,
      onJump: (other) => selectEvent(other, { showPanel: true }) });
  } catch (error) {
    if (error.kind === "not-found") {
      clear(panel).append(h("p", { class: "hint" }, "This event is no longer in memory (merged into another)."));
    } else reportError(error);
  }
}

function deselect() {
  state.view.event = null;
  state.focusNeighbours = new Set();
  graph.cy.$("node:selected").unselect();
  setHash();
  render(false);
}

// -- ask -----------------------------------------------------------------------------------------------------------

async function ask(event) {
  event.preventDefault();
  if (!state.conversationId) return;
  const button = $("ask-button");
  button.disabled = true;
  button.textContent = "Asking…";
  try {
    const response = await state.api.post("/v1/query", { conversation_id: state.conversationId,
      question: $("question").value, budget_turns: Number($("budget").value), explain: true });
    await highlight(response);
  } catch (error) {
    reportError(error);
  } finally {
    button.disabled = false;
    button.textContent = "Ask (Ctrl+Enter)";
  }
}

async function highlight(response) {
  const path = evidencePath(response);
  // The path's events with their relations: each is drawn one by one, the walked relations between them.
  const events = new Set([...path.seeds, ...path.evidence, ...path.steps.flatMap((s) => [s.source, s.target])]);
  await loadFocus([...events].filter((id) => !state.model.topics.has(id)));
  state.highlight = { ...path, events };
  state.evidenceTurns = new Set(response.turn_ids);
  for (const id of events) if (state.model.events.has(id)) state.revealed.add(id);
  render(false);
  graph.fitHighlight();
  loadEventList(true);
  renderAnswer($("ask-result"), { response, model: state.model,
    onEvent: (id) => selectEvent(id, { showPanel: true }) });
  $("clear-highlight").hidden = false;
}

function clearHighlight(draw = true) {
  if (state.highlight) for (const id of state.highlight.events) state.revealed.delete(id);
  state.highlight = null;
  state.evidenceTurns = new Set();
  $("clear-highlight").hidden = true;
  if (draw) {
    render(false);
    loadEventList(true);
  }
}

// -- controls ------------------------------------------------------------------------------------------------------

function buildRelationFilter() {
  const types = $("relation-types");
  for (const [type, style] of Object.entries(RELATION_TYPES)) {
    const box = h("input", { type: "checkbox", value: type, onchange: (e) => {
      if (e.target.checked) state.view.types.add(type);
      else state.view.types.delete(type);
      filtersChanged();
    } });
    types.append(h("label", { dataset: { type } }, box, h("span", { class: "swatch", style: `border-color:${style.color};` +
      `border-top-style:${style.style}` }), style.label, " ", h("small", { class: "count" })));
  }
  for (const links of LINK_CHOICES) $("links").append(h("option", { value: String(links) }, `${links} strongest`));
  $("min-confidence").addEventListener("input", () => {
    $("min-confidence-value").textContent = Number($("min-confidence").value).toFixed(2);
  });
  $("min-confidence").addEventListener("change", () => {
    state.view.minConfidence = Number($("min-confidence").value);
    filtersChanged();
  });
  $("links").addEventListener("change", () => {
    state.view.links = Number($("links").value);
    filtersChanged();
  });
}

/** The controls as the view says (after a hash was read). */
function syncControls() {
  for (const box of $("relation-types").querySelectorAll("input")) box.checked = state.view.types.has(box.value);
  $("min-confidence").value = String(state.view.minConfidence);
  $("min-confidence-value").textContent = state.view.minConfidence.toFixed(2);
  if (![...$("links").options].some((o) => Number(o.value) === state.view.links)) {
    $("links").append(h("option", { value: String(state.view.links) }, `${state.view.links} strongest`));
  }
  $("links").value = String(state.view.links);
  $("layout").value = state.view.layout;
}

function renderRelationCounts() {
  const counts = new Map((state.model.overview?.relation_types ?? []).map((t) => [t.type, t]));
  for (const label of $("relation-types").querySelectorAll("label")) {
    const count = counts.get(label.dataset.type);
    label.querySelector(".count").textContent = count ? String(count.relations) : "0";
    label.title = count ? `${count.relations} active relations, ${count.passing} at or above the minimum confidence`
      : "none in this conversation";
  }
}

function filtersChanged() {
  setHash();
  refresh({ overview: true });
}

function wireControls() {
  buildRelationFilter();
  syncControls();
  $("layout").addEventListener("change", () => {
    state.view.layout = $("layout").value;
    setHash();
    render(true);
  });
  $("expand-all").addEventListener("click", () => setAllTopics(true));
  $("collapse-all").addEventListener("click", () => setAllTopics(false));
  for (const id of ["show-superseded", "time-from", "time-to"]) $(id).addEventListener("change", () => render(false));
  $("fit").addEventListener("click", () => graph.fit());
  $("clear-highlight").addEventListener("click", () => clearHighlight());
  $("more-events").addEventListener("click", () => loadEventList(false));
  $("limits-form").addEventListener("submit", (event) => {
    event.preventDefault();
    refresh({ topics: true, relayout: true });
  });
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("ask-form").requestSubmit();
  });
  $("change-key").addEventListener("click", () => changeCredentials());
  $("alert-close").addEventListener("click", hideAlert);
  window.addEventListener("hashchange", followHash);
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest("input, textarea, select");
    if (event.key === "/" && !typing) {
      event.preventDefault();
      $("search").focus();
    } else if (event.key === "Escape" && !typing && !$("login").open) {
      if (state.highlight) clearHighlight();
      else deselect();
    }
  });
  new ResizeObserver(() => graph.cy.resize()).observe(graphElement);
}

wireControls();
const saved = savedCredentials();
if (saved) connect(saved);
else changeCredentials();
