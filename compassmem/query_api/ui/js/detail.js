// The Event panel: what memory holds about one event, with its source turns and the relations around it.

import { fill, h } from "./dom.js";
import { formatDateTime, formatPlainDate, plural, relationType, shortId, topicColor } from "./format.js";

/**
 * event: GET /v1/events/{id}; model: the GraphModel (relations, topics); evidenceTurns: Set of turn ids the last
 * answer ranked; onJump(eventId) when a related event is chosen.
 */
export function renderDetail(panel, { event, model, evidenceTurns, onJump }) {
  const topic = event.cluster_id && model.topics.has(event.cluster_id) ? event.cluster_id : null;
  const topicIndex = topic ? model.topicOrder().get(topic) : -1;
  fill(panel,
    h("h3", {}, "Summary"),
    h("p", { class: "summary", id: "detail-summary" }, event.summary || "(no summary)"),
    h("div", { class: "chips" },
      event.provisional && h("span", { class: "chip provisional", title: "An open segment: it may still grow or merge" },
        "provisional"),
      topic && h("span", { class: "chip topic", style: `background:${topicColor(topicIndex)}` },
        `topic: ${model.topicLabel(topic)}`),
      h("span", { class: "chip" }, `version ${event.version}`),
      h("span", { class: "chip" }, plural(event.observations.length, "turn")),
      h("span", { class: "chip", title: event.event_id }, `id ${shortId(event.event_id)}`)),
    h("p", {}, h("strong", {}, "When: "),
      `${formatDateTime(event.temporal_info.start)} – ${formatDateTime(event.temporal_info.end)}`),
    event.participants.length > 0 && h("p", {}, h("strong", {}, "Participants: "), event.participants.join(", ")),
    event.entities.length > 0 && h("p", {}, h("strong", {}, "Entities: "), event.entities.join(", ")),
    anchors(event.time_anchors),
    h("h3", {}, `Source turns (${event.observations.length})`),
    h("ul", { class: "turns", id: "detail-turns" }, event.observations.map((turn) =>
      h("li", { class: evidenceTurns.has(turn.turn_id) ? "evidence" : null, dataset: { turnId: turn.turn_id } },
        h("span", { class: "who" }, turn.speaker), " ",
        h("span", { class: "when" }, formatDateTime(turn.timestamp)), " ",
        h("span", { class: "tid" }, `[${turn.turn_id}${turn.session_id ? ` · session ${turn.session_id}` : ""}]`),
        h("div", {}, turn.text)))),
    relations(event.event_id, model, onJump),
    merges(event),
  );
}

function anchors(timeAnchors) {
  if (!timeAnchors.length) return h("p", { class: "hint" }, "No time expressions resolved in this event.");
  return [
    h("h3", {}, "Time anchors"),
    h("table", { id: "detail-anchors" },
      h("thead", {}, h("tr", {}, h("th", {}, "Said"), h("th", {}, "Resolved to"), h("th", {}, "Turn"))),
      h("tbody", {}, timeAnchors.map((anchor) => h("tr", {},
        h("td", {}, `“${anchor.expression}”`),
        h("td", {}, anchor.start === anchor.end ? formatPlainDate(anchor.start)
          : `${formatPlainDate(anchor.start)} – ${formatPlainDate(anchor.end)}`, ` (${anchor.granularity})`),
        h("td", {}, anchor.turn_id ?? "–"))))),
  ];
}

function relations(id, model, onJump) {
  const edges = model.relationsOf(id).sort((a, b) => b.confidence - a.confidence);
  if (!edges.length) return [h("h3", {}, "Relations"), h("p", { class: "hint" }, "No relations yet.")];
  return [
    h("h3", {}, `Relations (${edges.length})`),
    h("ul", { class: "relations", id: "detail-relations" }, edges.map((edge) => {
      const outgoing = edge.source === id;
      const other = outgoing ? edge.target : edge.source;
      const otherNode = model.events.get(other);
      const name = otherNode && !otherNode.stub ? otherNode.label : model.topics.has(other)
        ? `topic ${model.topicLabel(other)}` : `${shortId(other)} (not arrived yet)`;
      const style = relationType(edge.type);
      return h("li", { class: edge.superseded ? "superseded" : null },
        h("span", { class: "swatch", style: `border-color:${style.color}` }), " ",
        h("span", { class: "rel-type" }, `${style.label}${edge.subtype ? ` (${edge.subtype})` : ""}`),
        ` ${outgoing ? "→" : "←"} `,
        otherNode && !otherNode.stub
          ? h("button", { type: "button", class: "linkish", onclick: () => onJump(other) }, name) : name,
        ` · confidence ${edge.confidence.toFixed(2)}`,
        edge.superseded && ` · superseded${edge.superseded_by ? ` by ${shortId(edge.superseded_by)}` : ""}`,
        edge.evidence && h("span", { class: "evidence-text" }, `cue/evidence: “${edge.evidence}”`));
    })),
  ];
}

function merges(event) {
  return [
    h("h3", {}, "Merge history"),
    event.merged_from.length
      ? h("p", {}, `Version ${event.version}: ${plural(event.merged_from.length, "later segment")} merged in: `,
        event.merged_from.map(shortId).join(", "))
      : h("p", { class: "hint" }, `Version ${event.version}: nothing merged into it.`),
  ];
}
