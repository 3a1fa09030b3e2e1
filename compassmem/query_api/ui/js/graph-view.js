// The event graph on screen (cytoscape.js): styles, layouts, selection, the highlighted evidence path, new nodes.

import cytoscape from "../vendor/cytoscape.esm.min.js";
import { axisMarkers, graphElements, timelinePositions } from "./graph-elements.js";

const FRESH_MS = 4000;

// Labels: topics always (their size follows the zoom, so they stay readable when the graph is zoomed out); an event's
// only once the graph is zoomed in enough for it to be read, or under the pointer, unless it is the selected event or
// part of an answer; edges carry no label but counts and the steps of an answer's path.
const TOPIC_FONT = 15;
// Up to this many events drawn one by one, the topics keep their places on the ring or grid.
const FEW_EVENTS = 60;
// Events' labels are shown from this zoom on (and under the pointer, and for the selected event and an answer's).
const LABEL_ZOOM = 1.6;
const MAX_FIT_ZOOM = 1.25;
const EVENT_FONT = 13;
const STYLE = [
  { selector: "node[size]", style: { width: "data(size)", height: "data(size)" } },
  { selector: "node[color]", style: { "background-color": "data(color)" } },
  { selector: "node", style: { label: "data(label)", "font-size": EVENT_FONT, "text-wrap": "wrap", "text-max-width": 150,
    "text-valign": "bottom", "text-margin-y": 3, color: "#1d2430", "min-zoomed-font-size": 10, "border-width": 1,
    "border-color": "#fff", "text-background-color": "#fff", "text-background-opacity": 0.75,
    "text-background-padding": 1 } },
  // Shown from LABEL_ZOOM on (cytoscape's own min-zoomed-font-size rounds the zoom to a power of two).
  { selector: "node.minor", style: { "text-opacity": 0 } },
  { selector: "node.minor.zoomed", style: { "text-opacity": 1 } },
  { selector: "node.neighbour", style: { "border-width": 2, "border-color": "#2457c5" } },
  { selector: "node.provisional", style: { "border-width": 3, "border-style": "dashed", "border-color": "#8a5a00",
    "background-opacity": 0.55 } },
  { selector: "node.topic", style: { shape: "round-rectangle", "font-weight": 600, "text-valign": "bottom",
    "font-size": TOPIC_FONT, "min-zoomed-font-size": 0, "text-wrap": "none", "background-opacity": 0.85,
    "border-width": 2, "border-color": "#fff" } },
  { selector: "node.unclustered", style: { "border-style": "dashed", "border-color": "#8c96a5" } },
  { selector: "node.lane", style: { shape: "round-rectangle", "background-opacity": 0.07,
    "border-color": "data(color)", "border-width": 1, "border-opacity": 0.5,
    label: "data(label)", "text-valign": "top", "text-halign": "left", "text-rotation": 0, "font-size": TOPIC_FONT,
    "text-margin-x": 60, color: "data(color)", "font-weight": 600, padding: 14, events: "no", "min-zoomed-font-size": 0,
    "text-background-opacity": 0 } },
  { selector: "node.anchor", style: { shape: "rectangle", width: 1, height: 1, "background-opacity": 0,
    "border-width": 0, label: "data(label)", "text-valign": "top", "font-size": TOPIC_FONT, "font-weight": 600,
    color: "#1d2430", "min-zoomed-font-size": 0, events: "no", "text-background-opacity": 0.8 } },
  { selector: "node.axis", style: { shape: "rectangle", width: 1, height: 1, "background-opacity": 0,
    "border-width": 0, label: "data(label)", "text-valign": "top", "font-size": 12, color: "#5b6575",
    "min-zoomed-font-size": 0, events: "no", "text-background-opacity": 0 } },
  { selector: "edge", style: { width: "data(width)", "line-color": "data(color)", "target-arrow-color": "data(color)",
    "target-arrow-shape": "data(arrow)", "line-style": "data(lineStyle)", "curve-style": "bezier", opacity: 0.7,
    "arrow-scale": 0.8 } },
  { selector: "edge[label]", style: { label: "data(label)", "font-size": 12, "min-zoomed-font-size": 9,
    "text-background-color": "#fff", "text-background-opacity": 0.9, "text-background-padding": 2 } },
  { selector: "edge.link", style: { opacity: 0.55, "curve-style": "straight" } },
  { selector: "edge.focused", style: { opacity: 0.95 } },
  { selector: "edge.superseded", style: { "line-style": "dashed", opacity: 0.35, "target-arrow-shape": "tee" } },
  { selector: ".dimmed", style: { opacity: 0.18 } },
  // The evidence path stays readable when the whole graph is in view: its labels ignore the zoom threshold.
  { selector: "node.seed", style: { "border-width": 5, "border-color": "#f0a400", "z-index": 20 } },
  { selector: "node.evidence", style: { "border-width": 4, "border-color": "#e0457b", "z-index": 19 } },
  { selector: "node.seed, node.evidence", style: { "min-zoomed-font-size": 0, "font-size": 16,
    "text-background-opacity": 0.85, "text-max-width": 240 } },
  { selector: "node.seed.evidence", style: { "border-color": "#f0a400", "outline-width": 3,
    "outline-color": "#e0457b" } },
  { selector: "edge.path", style: { "line-color": "#e0457b", "target-arrow-color": "#e0457b", width: 4, opacity: 1,
    "z-index": 30, "font-weight": 700, color: "#b0164f", "font-size": 18, "min-zoomed-font-size": 0 } },
  { selector: "node.fresh", style: { "border-width": 6, "border-color": "#3ddc6a" } },
  { selector: "node:selected", style: { "border-width": 4, "border-color": "#2457c5", "z-index": 40,
    "min-zoomed-font-size": 0, "font-weight": 600, "text-opacity": 1 } },
  { selector: "node.hover", style: { "min-zoomed-font-size": 0, label: "data(full)", "z-index": 50, "text-opacity": 1,
    "text-background-opacity": 0.95, "text-max-width": 260 } },
  { selector: "edge.hover", style: { label: "data(title)", "min-zoomed-font-size": 0, "font-size": 12,
    "text-background-color": "#fff", "text-background-opacity": 0.95, opacity: 1, "z-index": 50 } },
];

export class GraphView {
  /** onSelect(eventId | null) when an event is clicked (null: the background); onTopic(topicId) for topics. */
  constructor(container, { onSelect, onTopic }) {
    this.container = container;
    this.cy = cytoscape({ container, style: STYLE, minZoom: 0.02, maxZoom: 4, boxSelectionEnabled: false });
    this.fresh = new Map();
    this.lastRender = { nodes: 0, edges: 0, events: 0, topics: 0, ms: 0 };
    // Labels of minor events and edge details under the pointer; topic labels keep a readable size at any zoom.
    this.cy.on("mouseover", "node, edge", (event) => event.target.addClass("hover"));
    this.cy.on("mouseout", "node, edge", (event) => event.target.removeClass("hover"));
    this.cy.on("zoom", () => {
      if (this.zooming) return;
      this.zooming = requestAnimationFrame(() => {
        this.zooming = null;
        this.scaleTopicLabels();
      });
    });
    this.cy.on("tap", "node", (event) => {
      const kind = event.target.data("kind");
      if (kind === "event") onSelect(event.target.id());
      else if (kind === "topic") onTopic(event.target.id());
    });
    this.cy.on("tap", (event) => {
      if (event.target === this.cy) onSelect(null);
    });
  }

  /**
   * Draws the model under `view`. relayout: run the layout again (a new conversation or layout), otherwise nodes
   * already on screen keep their place in the force layout and new ones go next to a neighbour.
   */
  render(model, view, { relayout }) {
    const started = performance.now();
    const elements = graphElements(model, view);
    const before = new Map(this.cy.nodes().map((n) => [n.id(), { ...n.position() }]));
    const selected = this.cy.$("node:selected").map((n) => n.id());
    const aspect = Math.max(0.5, this.cy.width() / Math.max(1, this.cy.height()));
    const positions = view.timeline ? timelinePositions(elements, model, aspect) : null;
    this.cy.batch(() => {
      this.cy.elements().remove();
      this.cy.add([...elements.nodes, ...elements.edges]);
      if (positions) {
        this.cy.nodes().forEach((n) => positions.has(n.id()) && n.position(positions.get(n.id())));
        this.cy.add(axisMarkers(elements, positions));
      } else if (!relayout) {
        this.cy.nodes().forEach((n) => n.position(before.get(n.id()) ?? neighbourSpot(n, before)));
      }
      for (const id of selected) this.cy.getElementById(id).select();
      for (const id of this.fresh.keys()) this.cy.getElementById(id).addClass("fresh");
    });
    if (!positions && (relayout || before.size === 0)) {
      this.layOut();
    } else if (relayout) {
      this.fit();
    }
    this.labelled = null;
    this.scaleTopicLabels();
    this.lastRender = { nodes: this.cy.nodes('[kind = "event"], [kind = "topic"]').length,
      edges: this.cy.edges().length, events: this.eventNodeCount(), topics: this.cy.nodes('[kind = "topic"]').length,
      ms: performance.now() - started, zoom: this.cy.zoom(), width: this.cy.width(), height: this.cy.height() };
    return elements;
  }

  /**
   * The force layout. Every topic has a place on a ring (up to 10) or a grid filling the panel, in the overview's
   * order, its label under it in its own room; the events drawn one by one sit in a disc around their topic's place,
   * in time order from the middle out. The fit lands near 1:1, so labels read at the size they are set in. Many
   * events (topics expanded): a force layout from there, in room that grows with the count.
   */
  layOut() {
    const width = Math.max(200, this.cy.width());
    const height = Math.max(200, this.cy.height());
    const topics = this.cy.nodes('[kind = "topic"]');
    const events = this.cy.nodes('[kind = "event"]');
    const few = events.length <= FEW_EVENTS;
    const scale = few ? 1 : Math.sqrt(events.length / FEW_EVENTS);
    // Every topic has its place, drawn as one node or not: the events of an expanded topic start around its place.
    const anchors = this.cy.nodes('[kind = "anchor"]');
    const slots = [...new Map([...topics, ...events].map((n) => [n.data("topic"), n.data("rank")]))]
      .sort((a, b) => a[1] - b[1] || String(a[0]).localeCompare(String(b[0]))).map(([key]) => key);
    const places = topicPlaces(slots, width * scale, height * scale);
    topics.forEach((node) => {
      const place = places.get(node.data("topic"));
      node.position({ x: place.x, y: place.y });
      node.style({ "text-wrap": "wrap", "text-max-width": place.room });
    });
    const around = new Map();
    // In time order, from the middle out.
    events.sort((a, b) => String(a.data("start")).localeCompare(String(b.data("start")))).forEach((node) => {
      const place = places.get(node.data("topic"));
      const k = around.get(node.data("topic")) ?? 0;
      around.set(node.data("topic"), k + 1);
      const angle = k * 2.4; // the golden angle: a sunflower of the topic's events around its place
      const radius = 18 + 14 * Math.sqrt(k);
      node.position({ x: place.x + radius * Math.cos(angle), y: place.y + radius * Math.sin(angle) });
    });
    anchors.forEach((node) => {
      const place = places.get(node.data("topic"));
      node.position({ x: place.x, y: place.y - 26 - 14 * Math.sqrt(node.data("count")) });
    });
    if (slots.length <= 1 && events.nonempty()) {
      // One group (a conversation without topics yet): its events spread over the panel by a force layout.
      anchors.remove();
      this.cy.layout({ name: "cose", animate: false, randomize: true, fit: false, padding: 30, nodeRepulsion: () => 9000,
        idealEdgeLength: () => 80, numIter: 1000, nodeDimensionsIncludeLabels: true,
        boundingBox: { x1: 30, y1: 30, w: width * scale - 60, h: height * scale - 60 } }).run();
    } else if (!few) {
      anchors.remove();
      // Many events: a force layout from there (their places kept for the few: a disc per topic, readable as such).
      this.cy.layout({ name: "cose", animate: false, randomize: false, fit: false, padding: 30,
        nodeRepulsion: () => 6000, idealEdgeLength: (edge) => (edge.hasClass("link") ? 200 : 50),
        edgeElasticity: (edge) => (edge.hasClass("link") ? 800 : 200), nodeOverlap: 12, gravity: 0.4,
        numIter: 1000, nodeDimensionsIncludeLabels: true,
        boundingBox: { x1: 20, y1: 20, w: width * scale - 40, h: height * scale - 40 } }).run();
    }
    this.fit();
  }

  /** Topic and lane labels that still read when the graph is zoomed out (up to twice their size at 1:1). */
  scaleTopicLabels() {
    const zoom = this.cy.zoom();
    const size = Math.round(Math.min(TOPIC_FONT * 2, TOPIC_FONT / Math.min(1, zoom)));
    const zoomed = zoom >= LABEL_ZOOM;
    this.cy.batch(() => {
      this.cy.nodes(".topic, .lane").style("font-size", size);
      if (zoomed !== this.labelled) this.cy.nodes(".minor").toggleClass("zoomed", zoomed);
    });
    this.labelled = zoomed;
  }

  /** The whole graph in view, never magnified past MAX_FIT_ZOOM (a handful of nodes would fill the panel). */
  fit() {
    this.cy.fit(this.cy.elements(), 24);
    if (this.cy.zoom() > MAX_FIT_ZOOM) {
      this.cy.zoom(MAX_FIT_ZOOM);
      this.cy.center();
    }
  }

  /** Zooms onto the highlighted evidence path (the rest stays on the canvas, dimmed). */
  fitHighlight() {
    const path = this.cy.$("node.seed, node.evidence, edge.path").union(this.cy.$("edge.path").connectedNodes());
    if (path.nonempty()) this.cy.animate({ fit: { eles: path, padding: 50 }, duration: 250 });
  }

  /** Marks nodes that just arrived for a few seconds. */
  markFresh(ids) {
    for (const id of ids) {
      clearTimeout(this.fresh.get(id));
      this.cy.getElementById(id).addClass("fresh");
      this.fresh.set(id, setTimeout(() => {
        this.fresh.delete(id);
        this.cy.getElementById(id).removeClass("fresh");
      }, FRESH_MS));
    }
  }

  select(id, { center = true } = {}) {
    this.cy.$("node:selected").unselect();
    const node = this.cy.getElementById(id);
    if (node.empty()) return;
    node.select();
    if (center && !this.visible(node)) this.cy.animate({ center: { eles: node }, duration: 200 });
  }

  visible(node) {
    const box = node.renderedBoundingBox();
    return box.x1 >= 0 && box.y1 >= 0 && box.x2 <= this.cy.width() && box.y2 <= this.cy.height();
  }

  eventNodeCount() {
    return this.cy.nodes('[kind = "event"]').length;
  }
}

/** Where a node new to the force layout goes: next to a neighbour already placed, else the middle. */
function neighbourSpot(node, placed) {
  const neighbour = node.neighborhood("node").map((n) => placed.get(n.id())).find(Boolean);
  const jitter = () => (Math.random() - 0.5) * 60;
  if (neighbour) return { x: neighbour.x + 40 + jitter(), y: neighbour.y + jitter() };
  const values = [...placed.values()];
  if (!values.length) return { x: 0, y: 0 };
  return { x: values.reduce((s, p) => s + p.x, 0) / values.length + jitter(),
    y: values.reduce((s, p) => s + p.y, 0) / values.length + jitter() };
}

/** Places for the topics (keys in order): an ellipse (up to 10) or a grid filling width x height, each with the
 * room its label may wrap in. */
function topicPlaces(keys, width, height) {
  const places = new Map();
  const n = keys.length;
  if (n <= 10) {
    const rx = Math.max(40, width / 2 - 110);
    const ry = Math.max(40, height / 2 - 70);
    const room = Math.max(90, Math.min(200, (2 * Math.PI * Math.min(rx, ry)) / Math.max(1, n) - 12));
    keys.forEach((key, i) => {
      const angle = -Math.PI / 2 + (2 * Math.PI * i) / n;
      places.set(key, n === 1 ? { x: width / 2, y: height / 2, room }
        : { x: width / 2 + rx * Math.cos(angle), y: height / 2 + ry * Math.sin(angle), room });
    });
    return places;
  }
  const columns = Math.ceil(Math.sqrt((n * width) / height));
  const rows = Math.ceil(n / columns);
  const cellWidth = width / columns;
  const cellHeight = height / rows;
  keys.forEach((key, i) => places.set(key, { x: (i % columns + 0.5) * cellWidth,
    y: (Math.floor(i / columns) + 0.35) * cellHeight, room: Math.max(60, cellWidth - 14) }));
  return places;
}
