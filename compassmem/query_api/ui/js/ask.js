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

/** Ranked turns with what the evidence says about them (speaker, time, text, event); onTurn(eventId). */
export function renderAnswer(container, { response, model, onEvent }) {
  const turns = new Map();
  for (const item of response.evidence) {
    for (const turn of item.turns) turns.set(turn.turn_id, { ...turn, event_id: item.event_id });
  }
  const path = evidencePath(response);
  fill(container,
    response.answer && [h("h3", {}, "Answer"), h("p", { class: "answer" }, response.answer)],
    h("h3", {}, "Timings"),
    h("div", { class: "timings", id: "ask-timings" }, Object.entries(response.timings_ms).map(([phase, ms]) =>
      h("span", {}, `${phase} ${ms.toFixed(1)} ms`))),
    response.subgoals.length > 1 && [h("h3", {}, "Subgoals"),
      h("ol", { class: "path-steps" }, response.subgoals.map((goal) => h("li", {}, goal)))],
    h("h3", {}, `Ranked turns (${response.turn_ids.length})`),
    h("ol", { class: "ranked", id: "ranked-turns" }, response.turn_ids.map((turnId) => {
      const turn = turns.get(turnId);
      const event = turn?.event_id ?? model.eventOfTurn(turnId)?.id;
      return h("li", { dataset: { turnId } },
        h("span", { class: "tid" }, turnId), " ",
        turn && [h("strong", {}, turn.speaker), " ", h("span", { class: "when" }, formatDateTime(turn.timestamp)),
          h("div", {}, turn.text)],
        event && h("button", { type: "button", class: "linkish", onclick: () => onEvent(event) }, "show event"));
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

function eventName(model, id) {
  const event = model.events.get(id);
  if (event && !event.stub) return `“${event.label.slice(0, 40)}${event.label.length > 40 ? "…" : ""}”`;
  return model.topics.has(id) ? `topic ${model.topicLabel(id)}` : shortId(id);
}
