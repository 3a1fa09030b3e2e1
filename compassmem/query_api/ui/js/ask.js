// The Ask panel: POST /v1/query, then the evidence path for the graph and the ranked turns beside it.

import { fill, h } from "./dom.js";
import { formatDateTime, relationType, shortId } from "./format.js";

/** What the graph highlights for an answer: seed events, evidence events, and the walked steps in order. */
export function evidencePath(response) {
  const seeds = new Set();
  const evidence = new Set();
  const steps = [];
  for (const item of response.evidence) {
    evidence.add(item.event_id);
    if (item.path.length === 0) seeds.add(item.event_id);
    else seeds.add(item.path[0].source);
    for (const step of item.path) {
      if (!steps.some((s) => s.source === step.source && s.target === step.target && s.type === step.type)) {
        steps.push({ source: step.source, target: step.target, type: step.type, order: steps.length + 1 });
      }
    }
  }
  return { seeds, evidence, steps };
}

/** Ranked turns with what the evidence says about them (speaker, time, text, event) and, when the response holds an
 * explanation, a collapsible "why this turn?" for each; onEvent(eventId). */
export function renderAnswer(container, { response, model, onEvent }) {
  const turns = new Map();
  for (const item of response.evidence) {
    for (const turn of item.turns) turns.set(turn.turn_id, { ...turn, event_id: item.event_id });
  }
  const why = new Map((response.explanation?.turns ?? []).map((explained) => [explained.turn_id, explained]));
  const path = evidencePath(response);
  fill(container,
    response.answer && [h("h3", {}, "Answer"), h("p", { class: "answer" }, response.answer)],
    h("h3", {}, "Timings"),
    h("div", { class: "timings", id: "ask-timings" }, Object.entries(response.timings_ms).map(([phase, ms]) =>
      h("span", {}, `${phase} ${ms.toFixed(1)} ms`))),
    response.subgoals.length > 1 && [h("h3", {}, "Subgoals"),
      h("ol", { class: "path-steps" }, response.subgoals.map((goal) => h("li", {}, goal)))],
    response.explanation && questionRead(response.explanation),
    h("h3", {}, `Ranked turns (${response.turn_ids.length})`),
    h("ol", { class: "ranked", id: "ranked-turns" }, response.turn_ids.map((turnId) => {
      const turn = turns.get(turnId);
      const event = turn?.event_id ?? model.eventOfTurn(turnId)?.id;
      return h("li", { dataset: { turnId } },
        h("span", { class: "tid" }, turnId), " ",
        turn && [h("strong", {}, turn.speaker), " ", h("span", { class: "when" }, formatDateTime(turn.timestamp)),
          h("div", {}, turn.text)],
        event && h("button", { type: "button", class: "linkish", onclick: () => onEvent(event) }, "show event"),
        why.has(turnId) && whyThisTurn(why.get(turnId), model));
    })),
    h("h3", {}, "Evidence path"),
    path.steps.length
      ? h("ol", { class: "path-steps", id: "path-steps" }, path.steps.map((step) => h("li", {},
        `${eventName(model, step.source)} → ${relationType(step.type).label} → ${eventName(model, step.target)}`)))
      : h("p", { class: "hint" }, "The evidence came straight from search: no relation was walked."),
    h("p", { class: "hint" }, `${path.seeds.size} seed event(s) (orange rings), ${path.evidence.size} evidence ` +
      "event(s) (pink rings), walked relations numbered in the order they were taken."),
  );
}

const CHANNELS = {
  dense: "dense search", passage: "passage search", keyword: "keyword search", time: "time search",
  category: "category labels", wish: "standing wishes", window: "keyword windows (BM25)", walk: "graph walk",
};
const TOP_CONTRIBUTIONS = 5;

/** How the question was read: its shape, what it asks for, the times it names. */
function questionRead(explanation) {
  const q = explanation.question;
  const flags = ["temporal", "causal", "aggregate"].filter((flag) => q[flag]);
  return h("details", { class: "why", id: "question-why" },
    h("summary", {}, "how the question was read"),
    h("dl", {},
      h("dt", {}, "shape"), h("dd", {}, q.shape, flags.length ? ` (${flags.join(", ")})` : ""),
      q.asked_speakers.length > 0 && [h("dt", {}, "asks about"), h("dd", {}, q.asked_speakers.join(", "))],
      q.categories.length > 0 && [h("dt", {}, "category"),
        h("dd", {}, [...new Set(q.categories.map((c) => c.name.replaceAll("_", " ")))].join(", "))],
      q.time_spans.length > 0 && [h("dt", {}, "times"),
        h("dd", {}, q.time_spans.map((s) => s.start === s.end ? s.start : `${s.start} – ${s.end}`).join("; "))],
      h("dt", {}, "subgoals"),
      h("dd", {}, h("ol", { class: "path-steps" }, q.subgoals.map((goal) =>
        h("li", {}, goal.text, h("span", { class: "hint" }, ` (best event ${goal.best_similarity.toFixed(2)})`)))))));
}

/** One ranked turn's explanation: the channels that found it, its largest feature contributions, its path. */
function whyThisTurn(explained, model) {
  const moved = explained.score_rank !== explained.rank
    ? ` (${ordinal(explained.score_rank)} by score alone of ${explained.candidates} candidates)`
    : ` of ${explained.candidates} candidates`;
  const contributions = Object.entries(explained.contributions);
  return h("details", { class: "why", dataset: { turnId: explained.turn_id } },
    h("summary", {}, "why this turn?"),
    h("p", { class: "why-score" }, `score ${explained.score.toFixed(3)}, ranked ${ordinal(explained.rank)}${moved}`),
    h("h4", {}, "Found by"),
    // Divs, not list items: the ranked list's own items are what "#ranked-turns li" finds.
    h("div", { class: "why-channels" },
      explained.found_with_event && h("div", { class: "hint" }, "no search returned it: it came in with its event"),
      explained.channels.map((channel) => h("div", { dataset: { channel: channel.channel, stage: channel.stage } },
        h("strong", {}, CHANNELS[channel.channel] ?? channel.channel), ` #${channel.rank}`,
        h("span", { class: "hint" }, ` score ${channel.score.toFixed(3)}`,
          channel.subgoal ? ` · “${channel.subgoal}”` : "")))),
    h("h4", {}, "Top contributions"),
    h("table", { class: "why-features" },
      h("thead", {}, h("tr", {}, h("th", {}, "feature"), h("th", {}, "value"), h("th", {}, "× weight"))),
      h("tbody", {}, contributions.slice(0, TOP_CONTRIBUTIONS).map(([name, contribution]) => h("tr", {},
        h("td", {}, name), h("td", {}, (explained.features[name] ?? 0).toFixed(3)),
        h("td", { class: contribution < 0 ? "negative" : "" }, `${contribution >= 0 ? "+" : ""}${contribution.toFixed(3)}`))))),
    contributions.length > TOP_CONTRIBUTIONS &&
      h("p", { class: "hint" }, `${contributions.length - TOP_CONTRIBUTIONS} smaller contribution(s) not shown`),
    h("h4", {}, "Path"),
    explained.path.length
      ? h("div", { class: "why-path" }, explained.path.map((step, index) => h("div", {},
        `${index + 1}. ${eventName(model, step.source)} → ${relationType(step.type).label} → ` +
        eventName(model, step.target))))
      : h("p", { class: "hint why-path" }, `${eventName(model, explained.event_id)}, found by search (no relation walked)`));
}

function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] ?? "th");
  return `${n}${suffix}`;
}

function eventName(model, id) {
  const event = model.events.get(id);
  if (event && !event.stub) return `“${event.label.slice(0, 40)}${event.label.length > 40 ? "…" : ""}”`;
  return model.topics.has(id) ? `topic ${model.topicLabel(id)}` : shortId(id);
}
