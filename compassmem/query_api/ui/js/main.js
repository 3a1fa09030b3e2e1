// The explorer page: wires the panels to the API and to each other. Deep links: #conversation=ID&event=ID.

import { Api } from "./api.js";
import { evidencePath, renderAnswer } from "./ask.js";
import { ConversationList } from "./conversations.js";
import { renderDetail } from "./detail.js";
import { clear, h } from "./dom.js";
import { RELATION_TYPES, formatDateTime, plural } from "./format.js";
import { GraphModel } from "./graph-model.js";
import { GraphView } from "./graph-view.js";
import { Listbox } from "./listbox.js";
import { LiveStream } from "./live.js";
import { askCredentials, savedCredentials } from "./session.js";
import { Tabs } from "./tabs.js";

// Above this many events a graph opens grouped into topic nodes, which expand on click.
const GROUP_ABOVE = 400;
const READY_WAIT_MS = 1000;

const $ = (id) => document.getElementById(id);
const graphElement = $("graph");

const state = {
  api: null,
  conversations: null,
  conversationId: null,
  model: null,
  live: null,
  pending: [], // live changes that arrived before the graph did
  selected: null,
  highlight: null,
  evidenceTurns: new Set(),
  expanded: new Set(),
  // Shared participants link nearly every event of a two-person chat: off until asked for.
  hiddenTypes: new Set(["same_participant"]),
  firstRender: true,
};

const tabs = new Tabs(document.querySelector(".tabs"));
const graph = new GraphView(graphElement, {
  onSelect: (id) => (id ? selectEvent(id, { showPanel: true }) : deselect()),
  onTopic: (id) => {
    if (!$("group-topics").checked) return;
    state.expanded.add(id);
    render(false);
  },
});
const eventList = new Listbox($("event-list"), { onSelect: (id, { open }) => selectEvent(id, { showPanel: open }) });
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
  if (state.conversationId) openConversation(state.conversationId);
}

// -- connection ----------------------------------------------------------------------------------------------------

async function changeCredentials(reason = "") {
  connect(await askCredentials(reason));
}

function connect(credentials) {
  hideAlert();
  state.api = new Api(credentials);
  $("connection").textContent = `tenant ${credentials.tenant} · ${credentials.key ? "API key set" : "no API key"}`;
  state.conversations = state.conversations ?? new ConversationList(state.api, { onOpen: (id) => openConversation(id),
    onError: reportError });
  state.conversations.api = state.api;
  state.conversations.reload();
  const link = new URLSearchParams(window.location.hash.slice(1));
  if (link.get("conversation")) openConversation(link.get("conversation"), link.get("event"));
  else if (state.conversationId) openConversation(state.conversationId);
}

// -- a conversation ------------------------------------------------------------------------------------------------

function openConversation(id, eventId = null) {
  state.live?.stop();
  Object.assign(state, { conversationId: id, model: null, pending: [], selected: null, highlight: null,
    evidenceTurns: new Set(), expanded: new Set() });
  state.conversations.markOpen(id);
  setHash();
  $("graph-title").textContent = id;
  $("graph-status").textContent = "Loading…";
  $("graph-empty").hidden = true;
  $("clear-highlight").hidden = true;
  clear($("ask-result"));
  clear($("panel-detail")).append(h("p", { class: "hint" }, "Click an event in the graph (or pick one in the " +
    "Events tab) to see its summary, source turns, time anchors, relations and merge history."));
  let readyNow;
  const ready = new Promise((resolve) => { readyNow = resolve; });
  let loaded = false;
  state.live = new LiveStream(state.api, id, {
    ready: () => {
      readyNow();
      if (loaded && state.conversationId === id) loadGraph(id, { quiet: true }); // ready after the load began
    },
    change: (change) => (state.model ? applyChange(change) : state.pending.push(change)),
    state: (name, text) => { $("live-state").dataset.state = name; $("live-state").textContent = text; },
    refused: reportError,
  });
  state.live.run();
  Promise.race([ready, new Promise((resolve) => setTimeout(resolve, READY_WAIT_MS))]).then(() => {
    loaded = true;
    if (state.conversationId === id) loadGraph(id, { eventId });
  });
}

async function loadGraph(id, { quiet = false, eventId = null } = {}) {
  let graphJson;
  try {
    graphJson = await state.api.get(`/v1/conversations/${encodeURIComponent(id)}/graph`, {
      max_nodes: $("max-nodes").value, since: $("since").value ? new Date($("since").value).toISOString() : null });
  } catch (error) {
    if (state.conversationId !== id) return;
    $("graph-status").textContent = "";
    if (error.kind === "not-found") {
      graph.cy.elements().remove();
      $("graph-empty").hidden = false;
      $("graph-empty").textContent = `No memory for “${id}” yet.`;
    }
    reportError(error);
    return;
  }
  if (state.conversationId !== id) return;
  const first = !state.model;
  state.model = new GraphModel(graphJson);
  for (const change of state.pending.splice(0)) applyToModel(change);
  if (first) $("group-topics").checked = state.model.eventCount() > GROUP_ABOVE;
  render(!quiet || first);
  renderEventList();
  if (state.firstRender) {
    state.firstRender = false;
    graphElement.dataset.firstRenderMs = performance.now().toFixed(0);
  }
  graphElement.dataset.conversation = id;
  if (eventId) selectEvent(eventId, { showPanel: true });
}

function view() {
  const from = $("time-from").value ? Date.parse(`${$("time-from").value}T00:00:00`) : null;
  const to = $("time-to").value ? Date.parse(`${$("time-to").value}T23:59:59.999`) : null;
  return { grouped: $("group-topics").checked, expanded: state.expanded, showSuperseded: $("show-superseded").checked,
    hiddenTypes: state.hiddenTypes, from, to, timeline: $("layout").value === "timeline", highlight: state.highlight };
}

function render(relayout) {
  if (!state.model) return;
  graph.render(state.model, view(), { relayout });
  if (state.selected) graph.select(state.selected, { center: false });
  graphElement.dataset.events = String(graph.eventNodeCount());
  graphElement.dataset.highlighted = String(graph.cy.nodes(".evidence, .seed").length);
  updateStatus();
}

function updateStatus() {
  const model = state.model;
  const relations = [...model.edges.values()];
  const superseded = relations.filter((e) => e.superseded).length;
  const limits = model.limits;
  const omitted = limits?.events_omitted
    ? ` · showing ${model.eventCount()} of ${limits.events_total} (server limits)` : "";
  $("graph-status").textContent = `${plural(model.eventCount(), "event")} · ${plural(relations.length - superseded,
    "relation")} (+${superseded} superseded) · ${plural(model.topics.size, "topic")}${omitted}`;
}

function renderEventList() {
  const list = $("event-list");
  clear(list).append(...state.model.orderedEvents().map((event) => h("li", {
    role: "option", id: `event-${event.id}`, "aria-selected": String(event.id === state.selected),
    dataset: { value: event.id }, class: state.highlight?.evidence.has(event.id) ? "evidence" : null },
  h("div", { class: "title" }, event.label, " ", event.provisional && h("span", { class: "badge" }, "provisional")),
  h("div", { class: "meta" }, `${formatDateTime(event.start)} · ${plural(event.turn_ids.length, "turn")}`))));
  if (state.selected) eventList.highlightValue(state.selected);
}

// -- live changes --------------------------------------------------------------------------------------------------

let rerender = null;

function applyToModel(change) {
  if (change.op === "forget") {
    state.model.events.clear();
    state.model.edges.clear();
    state.model.topics.clear();
    showAlert(`The conversation “${state.conversationId}” was forgotten.`, { kind: "info" });
    return [];
  }
  if (change.op === "delete") {
    state.model.removeEvent(change.removed);
    return [];
  }
  if (change.edge) state.model.upsertEdge(change.edge);
  if (change.node) state.model.upsertNode(change.node);
  return change.node?.kind === "event" ? [change.node.id] : [];
}

function applyChange(change) {
  const changed = applyToModel(change);
  graph.markFresh(changed);
  // Changes come in bursts (a batch writes events, then relations): draw once per burst.
  clearTimeout(rerender);
  rerender = setTimeout(() => {
    render(false);
    renderEventList();
    if (state.selected && changed.includes(state.selected)) selectEvent(state.selected, { showPanel: false });
  }, 60);
}

// -- selection and detail ------------------------------------------------------------------------------------------

async function selectEvent(id, { showPanel }) {
  state.selected = id;
  setHash();
  graph.select(id);
  eventList.highlightValue(id);
  if (showPanel) tabs.show("tab-detail");
  const panel = $("panel-detail");
  try {
    const event = await state.api.get(`/v1/events/${encodeURIComponent(id)}`);
    if (state.selected !== id) return;
    renderDetail(panel, { event, model: state.model, evidenceTurns: state.evidenceTurns,
      onJump: (other) => selectEvent(other, { showPanel: true }) });
  } catch (error) {
    if (error.kind === "not-found") {
      clear(panel).append(h("p", { class: "hint" }, "This event is no longer in memory (merged into another)."));
    } else reportError(error);
  }
}

function deselect() {
  state.selected = null;
  graph.cy.$("node:selected").unselect();
  setHash();
}

function setHash() {
  const parts = new URLSearchParams();
  if (state.conversationId) parts.set("conversation", state.conversationId);
  if (state.selected) parts.set("event", state.selected);
  history.replaceState(null, "", `#${parts}`);
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
    highlight(response);
  } catch (error) {
    reportError(error);
  } finally {
    button.disabled = false;
    button.textContent = "Ask (Ctrl+Enter)";
  }
}

function highlight(response) {
  state.highlight = evidencePath(response);
  state.evidenceTurns = new Set(response.turn_ids);
  // Events of the path inside collapsed topics are opened, so the whole walk is visible.
  for (const id of [...state.highlight.evidence, ...state.highlight.seeds]) {
    const topic = state.model.events.get(id)?.cluster_id;
    if (topic) state.expanded.add(topic);
  }
  render(false);
  graph.fitHighlight();
  renderEventList();
  renderAnswer($("ask-result"), { response, model: state.model,
    onEvent: (id) => selectEvent(id, { showPanel: true }) });
  $("clear-highlight").hidden = false;
}

function clearHighlight() {
  state.highlight = null;
  state.evidenceTurns = new Set();
  $("clear-highlight").hidden = true;
  render(false);
  renderEventList();
}

// -- controls ------------------------------------------------------------------------------------------------------

function buildRelationFilter() {
  const fieldset = $("relation-filter");
  for (const [type, style] of Object.entries(RELATION_TYPES)) {
    const box = h("input", { type: "checkbox", checked: !state.hiddenTypes.has(type), value: type, onchange: (e) => {
      if (e.target.checked) state.hiddenTypes.delete(type);
      else state.hiddenTypes.add(type);
      render(false);
    } });
    fieldset.append(h("label", {}, box, h("span", { class: "swatch", style: `border-color:${style.color};` +
      `border-top-style:${style.style}` }), style.label));
  }
}

function wireControls() {
  buildRelationFilter();
  $("layout").addEventListener("change", () => render(true));
  $("group-topics").addEventListener("change", () => { state.expanded.clear(); render(true); });
  for (const id of ["show-superseded", "time-from", "time-to"]) $(id).addEventListener("change", () => render(false));
  $("fit").addEventListener("click", () => graph.fit());
  $("clear-highlight").addEventListener("click", clearHighlight);
  $("limits-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (state.conversationId) loadGraph(state.conversationId);
  });
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("ask-form").requestSubmit();
  });
  $("change-key").addEventListener("click", () => changeCredentials());
  $("alert-close").addEventListener("click", hideAlert);
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
