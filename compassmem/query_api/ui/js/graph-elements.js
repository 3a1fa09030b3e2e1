// What to draw of a GraphModel under the view's settings (filters, grouping, highlight), as cytoscape elements, and
// where the timeline puts them. Pure functions: the view diffs their output against what is on screen.

import { NO_TOPIC_COLOR, formatPlainDate, relationType, topicColor } from "./format.js";

const LANE_HEIGHT = 80;
const MIN_GAP = 6;
const AXIS_Y = -60;

/**
 * view: { grouped, expanded: Set, showSuperseded, hiddenTypes: Set, from: ms|null, to: ms|null, timeline: bool,
 *         highlight: {seeds: Set, evidence: Set, steps: [{source, target, type, order}]} | null }
 */
export function graphElements(model, view) {
  const order = model.topicOrder();
  const visible = model.orderedEvents().filter((e) => inRange(e, view));
  const collapsedTopic = (event) =>
    view.grouped && event.cluster_id && model.topics.has(event.cluster_id) && !view.expanded.has(event.cluster_id)
      ? event.cluster_id : null;
  const shownAs = new Map(); // event id -> the node id it is drawn as (itself, or its collapsed topic)
  const nodes = new Map();
  const collapsedMembers = new Map();
  for (const event of visible) {
    const topic = collapsedTopic(event);
    shownAs.set(event.id, topic ?? event.id);
    if (topic) {
      collapsedMembers.set(topic, [...(collapsedMembers.get(topic) ?? []), event]);
      continue;
    }
    nodes.set(event.id, eventNode(event, model, order, view));
  }
  for (const [topic, members] of collapsedMembers) nodes.set(topic, collapsedNode(topic, members, model, order));

  const edges = [];
  const aggregated = new Map();
  const needed = new Set(); // endpoints that are not events on screen: expanded topics, stubs
  for (const edge of model.edges.values()) {
    if (view.hiddenTypes.has(edge.type) || (edge.superseded && !view.showSuperseded)) continue;
    const source = endpoint(edge.source, shownAs, model);
    const target = endpoint(edge.target, shownAs, model);
    if (!source || !target || source === target) continue;
    if (!nodes.has(source)) needed.add(source);
    if (!nodes.has(target)) needed.add(target);
    if (source !== edge.source || target !== edge.target) {
      const key = `agg:${source}|${target}|${edge.type}`;
      const entry = aggregated.get(key) ?? { source, target, type: edge.type, count: 0 };
      entry.count += 1;
      aggregated.set(key, entry);
      continue;
    }
    edges.push(relationEdge(edge));
  }
  for (const [key, entry] of aggregated) edges.push(aggregatedEdge(key, entry));
  for (const id of needed) {
    if (model.topics.has(id)) nodes.set(id, topicHub(id, model, order));
    else if (model.events.has(id)) nodes.set(id, stubNode(id));
  }
  if (view.timeline) addLanes(nodes, model, order, view);
  if (view.highlight) edges.push(...pathOverlays(view.highlight, edges, shownAs));
  return { nodes: [...nodes.values()], edges, shownAs };
}

function inRange(event, view) {
  const start = Date.parse(event.start);
  const end = Date.parse(event.end);
  return (view.from === null || end >= view.from) && (view.to === null || start <= view.to);
}

function endpoint(id, shownAs, model) {
  if (shownAs.has(id)) return shownAs.get(id);
  if (model.topics.has(id)) return id; // a part-of relation to a topic (its collapsed node, or a hub for it)
  return model.events.get(id)?.stub ? id : null;
}

function eventNode(event, model, order, view) {
  const topic = event.cluster_id && model.topics.has(event.cluster_id) ? event.cluster_id : null;
  const turns = event.turn_ids.length;
  const classes = ["event"];
  if (event.provisional) classes.push("provisional");
  if (view.highlight) {
    if (view.highlight.seeds.has(event.id)) classes.push("seed");
    if (view.highlight.evidence.has(event.id)) classes.push("evidence");
    if (!view.highlight.seeds.has(event.id) && !view.highlight.evidence.has(event.id)) classes.push("dimmed");
  }
  return {
    group: "nodes",
    data: {
      id: event.id, kind: "event", label: shortLabel(event.label), turns, size: nodeSize(turns),
      color: topic ? topicColor(order.get(topic)) : NO_TOPIC_COLOR, topic, turnIds: event.turn_ids,
      start: event.start, parent: view.timeline && topic && !view.grouped ? lane(topic) : undefined,
    },
    classes: classes.join(" "),
  };
}

function collapsedNode(topic, members, model, order) {
  const turns = members.reduce((sum, e) => sum + e.turn_ids.length, 0);
  return {
    group: "nodes",
    data: { id: topic, kind: "topic", label: `${model.topicLabel(topic)} (${members.length})`, members: members.length,
      size: Math.min(110, 34 + 9 * Math.sqrt(members.length)), color: topicColor(order.get(topic)), turns,
      start: members[0].start },
    classes: "topic collapsed",
  };
}

function topicHub(topic, model, order) {
  return { group: "nodes", data: { id: topic, kind: "topic", label: model.topicLabel(topic), size: 22,
    color: topicColor(order.get(topic)) }, classes: "topic hub" };
}

function stubNode(id) {
  return { group: "nodes", data: { id, kind: "stub", label: "", size: 10, color: "#fff" }, classes: "stub" };
}

function relationEdge(edge) {
  const style = relationType(edge.type);
  return {
    group: "edges",
    data: { id: edge.id, source: edge.source, target: edge.target, type: edge.type, color: style.color,
      lineStyle: style.style, arrow: style.arrow, width: 1 + 2.5 * edge.confidence, confidence: edge.confidence },
    classes: edge.superseded ? "relation superseded" : "relation",
  };
}

function aggregatedEdge(key, entry) {
  const style = relationType(entry.type);
  return {
    group: "edges",
    data: { id: key, source: entry.source, target: entry.target, type: entry.type, color: style.color,
      lineStyle: style.style, arrow: style.arrow, width: Math.min(9, 1 + Math.log2(1 + entry.count) * 1.5),
      label: entry.count > 1 ? String(entry.count) : "" },
    classes: "relation aggregated",
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

function nodeSize(turns) {
  return Math.min(64, 16 + 7 * Math.sqrt(turns));
}

function shortLabel(text) {
  return text.length > 48 ? `${text.slice(0, 46)}…` : text;
}

function lane(topic) {
  return `lane:${topic}`;
}

/** Timeline: topic lanes (boxes, when not grouped) and a time axis of day markers. */
function addLanes(nodes, model, order, view) {
  if (view.grouped) return;
  for (const node of [...nodes.values()]) {
    const parent = node.data.parent;
    if (parent && !nodes.has(parent)) {
      const topic = node.data.topic;
      nodes.set(parent, { group: "nodes", data: { id: parent, kind: "lane", label: model.topicLabel(topic),
        color: topicColor(order.get(topic)) }, classes: "lane", selectable: false });
    }
  }
}

/**
 * Positions for the timeline: x follows time (packed so that nodes in a lane never overlap), y the topic lane; lanes
 * are spread so that the whole fits a panel of the given width/height ratio.
 */
export function timelinePositions(elements, model, aspect) {
  const order = model.topicOrder();
  const placed = elements.nodes.filter((n) => n.data.start && (n.data.kind === "event" || n.data.kind === "topic"));
  if (!placed.length) return new Map();
  const times = placed.map((n) => Date.parse(n.data.start));
  const first = Math.min(...times);
  const span = Math.max(1, Math.max(...times) - first);
  const laneOf = (n) => (n.data.kind === "topic" ? n.data.id : n.data.topic);
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
    return { xs, right: Math.max(...lastX.values()) };
  };
  let { xs, right } = packed(lanes.length * LANE_HEIGHT * aspect);
  // A crowded lane pushed the axis wider than planned: stretch the time scale to match, so time stays aligned.
  if (right > lanes.length * LANE_HEIGHT * aspect) ({ xs, right } = packed(right));
  const laneHeight = Math.max(LANE_HEIGHT, right / aspect / lanes.length);
  const positions = new Map([...xs].map(([id, { x, laneIndex }]) => [id, { x, y: laneIndex * laneHeight }]));
  for (const node of elements.nodes) {
    if (!positions.has(node.data.id) && node.data.kind !== "lane") {
      positions.set(node.data.id, { x: -80, y: lanes.length * laneHeight }); // stubs and hubs: off to the side
    }
  }
  return positions;
}

function laneRank(topic, order) {
  return topic && order.has(topic) ? order.get(topic) : Number.MAX_SAFE_INTEGER;
}

/** Day markers above the timeline, at most one per 120 px. */
export function axisMarkers(elements, positions) {
  const days = new Map();
  for (const node of elements.nodes) {
    const at = positions.get(node.data.id);
    if (!at || !node.data.start || node.data.kind === "stub") continue;
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
