// How things are named and coloured, shared by the graph, its legend and the panels.

export const RELATION_TYPES = {
  causal: { label: "causal", color: "#d1495b", style: "solid", arrow: "triangle" },
  conditional: { label: "conditional", color: "#ef8a17", style: "dashed", arrow: "triangle" },
  motivational: { label: "motivational", color: "#2e9d52", style: "solid", arrow: "triangle" },
  temporal: { label: "temporal", color: "#8c96a5", style: "dotted", arrow: "vee" },
  part_of: { label: "part-of", color: "#7b4fc9", style: "dashed", arrow: "diamond" },
  same_entity: { label: "entity", color: "#1d8a99", style: "dotted", arrow: "none" },
  same_participant: { label: "participant", color: "#6fb7c2", style: "dotted", arrow: "none" },
  follow_up: { label: "follow-up", color: "#2457c5", style: "solid", arrow: "vee" },
};
const OTHER_RELATION = { label: "other", color: "#999", style: "solid", arrow: "vee" };

export function relationType(type) {
  return RELATION_TYPES[type] ?? { ...OTHER_RELATION, label: type };
}

// Twelve colours far enough apart to tell topics apart; events without a topic are grey.
const TOPIC_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
  "#9c755f", "#2f6f3e", "#a0cbe8", "#8cd17d"];
export const NO_TOPIC_COLOR = "#b8c0cc";

export function topicColor(index) {
  return index === null || index === undefined || index < 0 ? NO_TOPIC_COLOR : TOPIC_COLORS[index % TOPIC_COLORS.length];
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const dateOnly = new Intl.DateTimeFormat(undefined, { dateStyle: "medium" });

export function formatDateTime(iso) {
  return iso ? dateTime.format(new Date(iso)) : "–";
}

export function formatDate(iso) {
  return iso ? dateOnly.format(new Date(iso)) : "–";
}

/** "2023-05-08" (a date without time, as time anchors carry) shown in the reader's format, without a zone shift. */
export function formatPlainDate(day) {
  const [year, month, date] = day.split("-").map(Number);
  return dateOnly.format(new Date(year, month - 1, date));
}

export function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}
