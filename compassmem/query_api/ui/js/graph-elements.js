// What to draw of a GraphModel under the view's settings, as cytoscape elements, and where the timeline puts them.
// Pure functions: the view draws their output.
//
// A topic is one node until it is expanded; its events are drawn one by one when it is, and so are the events the
// reader asked about (the selected event and its neighbours, an answer's evidence, events that just arrived). Between
// collapsed topics the overview's strongest links stand for their relations (one edge per pair of topics); the
// loaded relations of the events drawn one by one are drawn when they pass the filters (relation types, minimum
// confidence), all of them for the selected event.

import { NO_TOPIC_COLOR, formatPlainDate, relationType, topicColor } from "./format.js";
import { NO_TOPIC } from "./graph-model.js";
import { laneNameWidth } from "./label-room.js";

// The least room between lanes: a topic's node (56 px at most), or a box around events (44 px and 14 px padding).
const LANE_HEIGHT = 64;
const BOXED_LANE_HEIGHT = 84;
// What the panel leaves the time axis: the lanes' names on the left (label-room.js's width), the dates above.
const AXIS_ROOM = 90;
const MIN_TIMELINE_WIDTH = 320;
const MIN_GAP = 8;
const AXIS_Y = -60;
// A lane's name sits left of its first event (and of the box around the lane's events).
const LANE_LABEL_X = -56;
const EVENT_LABEL_CHARS = 44;

/**
 * view: { expanded: Set<topic key>, revealed: Set<event id>, focus: event id | null, focusNeighbours: Set<event id>,
 *         types: Set<relation type>, minConfidence: number, showSuperseded, from: ms|null, to: ms|null,
 *         timeline: bool, highlight: {seeds: Set, evidence: Set, events: Set (every event of the path),
 *                                         steps: [{source, target, type, order}]} | null }
 */
export function graphElements(model, view) {
  const order = model.topicOrder();
  const nodes = new Map();
  const shownAs = new Map(); // event id -> the node it is drawn as (itself, or its collapsed topic)
  for (const event of model.orderedEvents()) {
    if (!inRange(event.start, event.end, view)) continue;
    const key = model.topicOf(event);
    if (view.expanded.has(key) || !model.topics.has(key) || picked(event.id, view)) {
      shownAs.set(event.id, event.id);
      nodes.set(event.id, eventNode(event, key, order, view));
    } else {
      shownAs.set(event.id, key);
    }
  }
  for (const [key, topic] of model.topics) {
    if (!view.expanded.has(key) && inRange(topic.first_at, topic.last_at, view)) {
      nodes.set(key, topicNode(key, topic, order, view.timeline));
    }
  }
  const collapsed = (id) => nodes.get(id)?.data.kind === "topic";

  const edges = [...topicLinks(model, view, collapsed)];
  const aggregated = new Map();
  for (const edge of model.edges.values()) {
    const focused = view.focus !== null && (edge.source === view.focus || edge.target === view.focus);
    if (!focused && (edge.superseded && !view.showSuperseded)) continue;
    if (!focused && !(view.types.has(edge.type) && edge.confidence >= view.minConfidence)) continue;
    const source = endpoint(edge.source, shownAs, nodes);
    const target = endpoint(edge.target, shownAs, nodes);
    if (!source || !target || source === target) continue;
    if (collapsed(source) && collapsed(target)) continue; // the overview's links stand for these
    if (source === edge.source && target === edge.target) {
      edges.push(relationEdge(edge, focused));
      continue;
    }
    const key = `agg:${source}|${target}|${edge.type}`;
    const entry = aggregated.get(key) ?? { source, target, type: edge.type, count: 0, focused: false, strongest: 0 };
    entry.count += 1;
    entry.strongest = Math.max(entry.strongest, edge.confidence);
    entry.focused ||= focused;
    aggregated.set(key, entry);
  }
  for (const [key, entry] of aggregated) edges.push(aggregatedEdge(key, entry));
  if (view.timeline) addLanes(nodes, model, order);
  else addAnchors(nodes, model, order, view);
  if (view.highlight) edges.push(...pathOverlays(view.highlight, edges, shownAs));
  return { nodes: [...nodes.values()], edges, shownAs };
}

/** Events drawn one by one whatever their topic: asked about, part of an answer, or just arrived. */
function picked(id, view) {
  return view.revealed.has(id) || id === view.focus || view.focusNeighbours.has(id) ||
    Boolean(view.highlight && (view.highlight.seeds.has(id) || view.highlight.evidence.has(id) ||
      view.highlight.events?.has(id)));
}

function inRange(start, end, view) {
  const from = end ? Date.parse(end) : null;
  const to = start ? Date.parse(start) : null;
  return (view.from === null || from === null || from >= view.from) && (view.to === null || to === null || to <= view.to);
}

/** A relation end as drawn: an event (or its collapsed topic), or a topic (part-of relations) when collapsed. */
function endpoint(id, shownAs, nodes) {
  if (shownAs.has(id)) return shownAs.get(id);
  return nodes.get(id)?.data.kind === "topic" ? id : null;
}

function eventNode(event, key, order, view) {
  const turns = event.turn_ids.length;
  const classes = ["event"];
  const major = event.id === view.focus || Boolean(view.highlight?.seeds.has(event.id) ||
    view.highlight?.evidence.has(event.id));
  if (!major) classes.push("minor");
  if (event.provisional) classes.push("provisional");
  if (view.focusNeighbours.has(event.id)) classes.push("neighbour");
  if (view.highlight) {
    if (view.highlight.seeds.has(event.id)) classes.push("seed");
    if (view.highlight.evidence.has(event.id)) classes.push("evidence");
    if (!view.highlight.seeds.has(event.id) && !view.highlight.evidence.has(event.id)) classes.push("dimmed");
  }
  return {
    group: "nodes",
    data: {
      id: event.id, kind: "event", label: shortLabel(event.label), full: event.label, turns, size: eventSize(turns),
      color: key === NO_TOPIC ? NO_TOPIC_COLOR : topicColor(order.get(key)), topic: key, turnIds: event.turn_ids,
      start: event.start, parent: view.timeline && view.expanded.has(key) ? lane(key) : undefined,
      rank: laneRank(key, order),
    },
    classes: classes.join(" "),
  };
}

function topicNode(key, topic, order, inLane) {
  const middle = topic.first_at && topic.last_at
    ? new Date((Date.parse(topic.first_at) + Date.parse(topic.last_at)) / 2).toISOString() : topic.first_at;
  return {
    group: "nodes",
    data: { id: key, kind: "topic", label: `${topic.label} · ${topic.events}`, full: topicTitle(topic),
      events: topic.events, size: Math.min(56, 22 + 3.5 * Math.sqrt(topic.events)), topic: key,
      color: key === NO_TOPIC ? NO_TOPIC_COLOR : topicColor(order.get(key)), start: middle,
      rank: laneRank(key, order) },
    classes: ["topic", "collapsed", key === NO_TOPIC && "unclustered", inLane && "in-lane"].filter(Boolean).join(" "),
  };
}

function topicTitle(topic) {
  const keywords = topic.keywords?.length ? topic.keywords.join(", ") : topic.label;
  return `${keywords}: ${topic.events} events, ${topic.turns} turns (click to show its events)`;
}

/** The overview's links between collapsed topics, one edge per pair (both directions, every type summed). */
function* topicLinks(model, view, collapsed) {
  const pairs = new Map();
  for (const link of model.overview?.links ?? []) {
    const source = link.source ?? NO_TOPIC;
    const target = link.target ?? NO_TOPIC;
    if (source === target || !collapsed(source) || !collapsed(target) || !view.types.has(link.type)) continue;
    const [a, b] = source < target ? [source, target] : [target, source];
    const key = `link:${a}|${b}`;
    const pair = pairs.get(key) ?? { source: a, target: b, relations: 0, strongest: 0, byType: new Map() };
    pair.relations += link.relations;
    pair.strongest = Math.max(pair.strongest, link.max_confidence);
    pair.byType.set(link.type, (pair.byType.get(link.type) ?? 0) + link.relations);
    pairs.set(key, pair);
  }
  for (const [key, pair] of pairs) {
    const [type] = [...pair.byType].sort((x, y) => y[1] - x[1])[0];
    const style = relationType(type);
    const kinds = [...pair.byType].map(([kind, n]) => `${n} ${relationType(kind).label}`).join(", ");
    yield {
      group: "edges",
      data: { id: key, source: pair.source, target: pair.target, type, color: style.color, lineStyle: "solid",
        arrow: "none", width: Math.min(10, 1.5 + 1.6 * Math.log2(1 + pair.relations)), label: String(pair.relations),
        title: `${kinds} (strongest ${pair.strongest.toFixed(2)})`, confidence: pair.strongest },
      classes: "link",
    };
  }
}

function relationEdge(edge, focused) {
  const style = relationType(edge.type);
  const classes = ["relation"];
  if (edge.superseded) classes.push("superseded");
  if (focused) classes.push("focused");
  return {
    group: "edges",
    data: { id: edge.id, source: edge.source, target: edge.target, type: edge.type, color: style.color,
      lineStyle: style.style, arrow: style.arrow, width: 1 + 2.5 * edge.confidence, confidence: edge.confidence,
      title: `${style.label} ${edge.confidence.toFixed(2)}` },
    classes: classes.join(" "),
  };
}

function aggregatedEdge(key, entry) {
  const style = relationType(entry.type);
  return {
    group: "edges",
    data: { id: key, source: entry.source, target: entry.target, type: entry.type, color: style.color,
      lineStyle: style.style, arrow: style.arrow, width: Math.min(9, 1 + Math.log2(1 + entry.count) * 1.5),
      label: entry.count > 1 ? String(entry.count) : "", confidence: entry.strongest,
      title: `${entry.count} ${style.label} (strongest ${entry.strongest.toFixed(2)})` },
    classes: entry.focused ? "relation aggregated focused" : "relation aggregated",
  };
}

/** The walked steps in order: drawn edges get their step numbers; a step with no drawn edge gets an overlay. */
function pathOverlays(highlight, edges, shownAs) {
  const overlays = [];
  const byEnds = new Map(edges.map((e) => [`${e.data.source}|${e.data.target}|${e.data.type}`, e]));
  for (const step of highlight.steps) {
    const source = shownAs.get(step.source) ?? step.source;
    const target = shownAs.get(step.target) ?? step.target;
    const drawn = byEnds.get(`${source}|${target}|${step.type}`);
    if (drawn) {
      drawn.classes += " path";
      drawn.data.label = drawn.data.label ? `${drawn.data.label}, ${step.order}` : String(step.order);
    } else if (shownAs.has(step.source) && shownAs.has(step.target) && source !== target) {
      overlays.push({ group: "edges", data: { id: `path:${step.order}`, source, target, type: step.type,
        color: "#e0457b", lineStyle: "dashed", arrow: "triangle", width: 3, label: String(step.order) },
      classes: "relation path overlay" });
    }
  }
  for (const edge of edges) if (!edge.classes.includes("path")) edge.classes += " dimmed";
  return overlays;
}

function eventSize(turns) {
  return Math.min(44, 14 + 5 * Math.sqrt(turns));
}

function shortLabel(text) {
  return text.length > EVENT_LABEL_CHARS ? `${text.slice(0, EVENT_LABEL_CHARS - 1)}…` : text;
}

function lane(topic) {
  return `lane:${topic}`;
}

/** Timeline: a box around each expanded topic's events, and every lane's name (timelinePositions puts it on the
 * lane's left). */
function addLanes(nodes, model, order) {
  for (const node of [...nodes.values()]) {
    const topic = node.data.topic;
    const color = topic === NO_TOPIC ? NO_TOPIC_COLOR : topicColor(order.get(topic));
    const parent = node.data.parent;
    if (parent && !nodes.has(parent)) {
      nodes.set(parent, { group: "nodes", data: { id: parent, kind: "lane", topic, color }, classes: "lane",
        selectable: false });
    }
    const name = `lane-label:${topic}`;
    if ((node.data.kind === "event" || node.data.kind === "topic") && !nodes.has(name)) {
      const count = model.topics.get(topic)?.events;
      nodes.set(name, { group: "nodes", data: { id: name, kind: "lane-label", topic, color, rank: laneRank(topic, order),
        label: count === undefined ? model.topicLabel(topic) : `${model.topicLabel(topic)} · ${count}` },
      classes: "lane-label", selectable: false, grabbable: false });
    }
  }
}

/** Force layout: the name of each expanded topic over its events (the view puts it above their disc). */
function addAnchors(nodes, model, order, view) {
  const shown = new Map();
  for (const node of nodes.values()) {
    if (node.data.kind === "event" && view.expanded.has(node.data.topic)) {
      shown.set(node.data.topic, (shown.get(node.data.topic) ?? 0) + 1);
    }
  }
  // One group alone (a conversation without topics yet) needs no name over it.
  if (shown.size === 1 && ![...nodes.values()].some((node) => node.data.kind === "topic")) return;
  for (const [key, count] of shown) {
    nodes.set(`anchor:${key}`, { group: "nodes", data: { id: `anchor:${key}`, kind: "anchor", topic: key, count,
      label: `${model.topicLabel(key)} (${count})`, rank: laneRank(key, order),
      color: key === NO_TOPIC ? NO_TOPIC_COLOR : topicColor(order.get(key)) }, classes: "anchor", selectable: false,
    grabbable: false });
  }
}

/**
 * Positions for the timeline in a panel of `width` x `height` px: x follows time (packed so that nodes in a lane never
 * overlap), y the topic's lane. Laid out at the panel's own scale (the lanes' names and the dates above take their
 * room), so that it is drawn near 1:1 unless its lanes or a crowded lane need more room than the panel has.
 */
export function timelinePositions(elements, model, { width, height }) {
  const order = model.topicOrder();
  const placed = elements.nodes.filter((n) => n.data.start && (n.data.kind === "event" || n.data.kind === "topic"));
  if (!placed.length) return new Map();
  const times = placed.map((n) => Date.parse(n.data.start));
  const first = Math.min(...times);
  const span = Math.max(1, Math.max(...times) - first);
  const laneOf = (n) => n.data.topic;
  const lanes = [...new Set(placed.map(laneOf))].sort((a, b) => laneRank(a, order) - laneRank(b, order));
  const sorted = placed.map((n, i) => ({ n, t: times[i] }))
    .sort((a, b) => a.t - b.t || a.n.data.id.localeCompare(b.n.data.id));
  const packed = (width) => {
    const xs = new Map();
    const lastX = new Map();
    for (const { n, t } of sorted) {
      const laneIndex = lanes.indexOf(laneOf(n));
      const x = Math.max(((t - first) / span) * width, (lastX.get(laneIndex) ?? -Infinity) + n.data.size + MIN_GAP);
      lastX.set(laneIndex, x);
      xs.set(n.data.id, { x, laneIndex });
    }
    return xs;
  };
  // A crowded lane runs on past the panel's width (its events pushed right); the time scale stays the panel's, since
  // stretching it to match would push the crowd at its end further still.
  const xs = packed(Math.max(MIN_TIMELINE_WIDTH, width - laneNameWidth(width) - 40));
  // A lane with a box around its events needs the box's padding above and below them.
  const boxed = elements.nodes.some((n) => n.data.kind === "lane");
  const laneHeight = Math.max(boxed ? BOXED_LANE_HEIGHT : LANE_HEIGHT, (height - AXIS_ROOM) / lanes.length);
  const positions = new Map([...xs].map(([id, { x, laneIndex }]) => [id, { x, y: laneIndex * laneHeight }]));
  for (const node of elements.nodes) {
    const lane = lanes.indexOf(node.data.topic);
    if (node.data.kind === "lane-label" && lane >= 0) {
      positions.set(node.data.id, { x: LANE_LABEL_X, y: lane * laneHeight });
    } else if (!positions.has(node.data.id) && node.data.kind !== "lane") {
      positions.set(node.data.id, { x: -80, y: lanes.length * laneHeight }); // anything without a time: aside
    }
  }
  return positions;
}

function laneRank(topic, order) {
  if (topic === NO_TOPIC) return Number.MAX_SAFE_INTEGER - 1;
  return topic && order.has(topic) ? order.get(topic) : Number.MAX_SAFE_INTEGER;
}

/** Day markers above the timeline, at most one per 120 px. */
export function axisMarkers(elements, positions) {
  const days = new Map();
  for (const node of elements.nodes) {
    const at = positions.get(node.data.id);
    if (!at || !node.data.start || node.data.kind !== "event") continue;
    const day = node.data.start.slice(0, 10);
    if (!days.has(day) || days.get(day) > at.x) days.set(day, at.x);
  }
  const markers = [];
  let lastX = -Infinity;
  for (const [day, x] of [...days].sort((a, b) => a[1] - b[1])) {
    if (x - lastX < 120) continue;
    lastX = x;
    markers.push({ group: "nodes", data: { id: `axis:${day}`, kind: "axis", label: formatPlainDate(day) }, classes: "axis",
      position: { x, y: AXIS_Y }, selectable: false, grabbable: false });
  }
  return markers;
}
