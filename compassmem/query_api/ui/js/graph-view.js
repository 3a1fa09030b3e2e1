// The event graph on screen (cytoscape.js): layouts, fitting, selection, the highlighted evidence path, new nodes;
// which labels are shown is label-room.js's, the tooltip tooltip.js's.

import cytoscape from "../vendor/cytoscape.esm.min.js";
import { axisMarkers, graphElements, timelinePositions } from "./graph-elements.js";
import { STYLE } from "./graph-style.js";
import { drawnBox, placeLabels, scaleLabels } from "./label-room.js";
import { Tooltip } from "./tooltip.js";

const FRESH_MS = 4000;
// Up to this many events drawn one by one, the topics keep their places on the ring or grid.
const FEW_EVENTS = 60;
// Events' labels are shown (where they fit) when this few are drawn one by one (a short conversation opens on its
// events, named), or from this zoom on; the selected event's and an answer's always.
const LABELLED_EVENTS = 12;
const LABEL_ZOOM = 1.6;
const MAX_FIT_ZOOM = 1.25;
// An answer's path is zoomed onto no closer than this: its labels read, the rest of the events stay unnamed.
const MAX_PATH_ZOOM = 1.5;
const FIT_PADDING = 16;

export class GraphView {
  /** onSelect(eventId | null) when an event is clicked (null: the background); onTopic(topicId) for topics. */
  constructor(container, { onSelect, onTopic }) {
    this.container = container;
    this.cy = cytoscape({ container, style: STYLE, minZoom: 0.02, maxZoom: 4, boxSelectionEnabled: false });
    this.fresh = new Map();
    this.lastRender = { nodes: 0, edges: 0, events: 0, topics: 0, ms: 0 };
    this.eventsLabelled = false;
    this.labelsPending = false; // a label pass is due (the browser tests wait for it)
    this.tooltip = new Tooltip(container.parentElement);
    this.hovered = null; // the node or edge under the pointer, whose tooltip is shown
    this.cy.on("mouseover", "node, edge", (event) => {
      this.hovered = event.target;
      this.hovered.addClass("hover");
      this.tooltip.show(tooltipText(this.hovered), container, event.renderedPosition);
    });
    this.cy.on("mouseout", "node, edge", (event) => {
      event.target.removeClass("hover");
      this.dropHovered();
    });
    container.addEventListener("mouseleave", () => this.dropHovered());
    // Whatever moves the view or changes the selection places the labels again, once per frame. The tooltip follows
    // its element there (a panel resized under a still pointer hid it, and it stayed hidden until the pointer left).
    this.cy.on("viewport resize select unselect", () => {
      this.followHovered();
      this.placeLabelsSoon();
    });
    // A view the page fitted is fitted again when the panel changes size; one the reader moved is left alone.
    this.fitted = null; // "all", "path" or null
    this.cy.on("scrollzoom dragpan pinchzoom", () => { this.fitted = null; });
    this.cy.on("resize", () => {
      if (this.fitted === "all") this.fit();
      else if (this.fitted === "path") this.fitHighlight();
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
    // The panel's size as it is now (the bars above it may have just grown): cytoscape keeps the one it last read.
    this.cy.resize();
    const elements = graphElements(model, view);
    const before = new Map(this.cy.nodes().map((n) => [n.id(), { ...n.position() }]));
    const selected = this.cy.$("node:selected").map((n) => n.id());
    const positions = view.timeline
      ? timelinePositions(elements, model, { width: this.cy.width(), height: this.cy.height() }) : null;
    this.cy.batch(() => {
      this.cy.elements().remove();
      this.cy.add([...elements.nodes, ...elements.edges]);
      if (positions) {
        // (No `a && b` callback: cytoscape's forEach stops at the first that returns false, the lanes' boxes.)
        this.cy.nodes().forEach((n) => {
          if (positions.has(n.id())) n.position(positions.get(n.id()));
        });
        this.cy.add(axisMarkers(elements, positions));
      } else if (!relayout) {
        this.cy.nodes().forEach((n) => n.position(before.get(n.id()) ?? neighbourSpot(n, before)));
      }
      for (const id of selected) this.cy.getElementById(id).select();
      for (const id of this.fresh.keys()) this.cy.getElementById(id).addClass("fresh");
    });
    this.followHovered(); // its element was replaced: hidden until the pointer moves onto the new one
    this.eventsLabelled = this.eventNodeCount() <= LABELLED_EVENTS;
    if (!positions && (relayout || before.size === 0)) {
      this.layOut();
    } else if (relayout) {
      this.fit();
    }
    this.placeLabelsSoon();
    this.lastRender = { nodes: this.cy.nodes('[kind = "event"], [kind = "topic"]').length,
      edges: this.cy.edges().length, events: this.eventNodeCount(), topics: this.cy.nodes('[kind = "topic"]').length,
      ms: performance.now() - started, zoom: this.cy.zoom(), width: this.cy.width(), height: this.cy.height() };
    return elements;
  }

  /**
   * The force layout. Every topic has a place on a ring (up to 10) or a grid filling the panel, in the overview's
   * order, its label on the ring's outside (under it on the grid) in its own room; the events drawn one by one sit in
   * a disc around their topic's place,
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
      node.style({ ...LABEL_SIDES[place.side], "text-wrap": "wrap", "text-max-width": place.room });
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

  /** The tooltip moved next to its element where that is drawn now; hidden when the element left the graph. */
  followHovered() {
    if (!this.hovered || this.hovered.removed()) {
      this.dropHovered();
      return;
    }
    const point = this.hovered.isNode() ? this.hovered.renderedPosition() : this.hovered.renderedMidpoint();
    this.tooltip.show(tooltipText(this.hovered), this.container, point);
  }

  dropHovered() {
    this.hovered = null;
    this.tooltip.hide();
  }

  /** Shows the labels that fit at this view, once per frame however many changes ask for it. */
  placeLabelsSoon() {
    if (this.labelsPending) return;
    this.labelsPending = true;
    requestAnimationFrame(() => {
      placeLabels(this.cy, { eventsLabelled: this.labelsWanted() });
      this.labelsPending = false;
    });
  }

  labelsWanted(zoom = this.cy.zoom()) {
    return this.eventsLabelled || zoom >= LABEL_ZOOM;
  }

  /** The whole graph in view, labels included, never magnified past MAX_FIT_ZOOM (a handful of nodes would fill
   * the panel). */
  fit() {
    this.cy.stop();
    this.cy.viewport(this.fitting(null, MAX_FIT_ZOOM));
    this.fitted = "all";
  }

  /** Zooms onto the highlighted evidence path (the rest stays on the canvas, dimmed). */
  fitHighlight() {
    const path = this.cy.$("node.seed, node.evidence").union(this.cy.$("edge.path").connectedNodes());
    if (path.empty()) return;
    this.cy.stop();
    this.cy.animate({ ...this.fitting(path, MAX_PATH_ZOOM), duration: 250 });
    this.fitted = "path";
  }

  /**
   * The zoom and pan that show `nodes` (every node when null) with their labels inside the panel. The names that
   * keep their size on screen grow in the graph's units as it is zoomed out, so the fit is found in a few rounds.
   */
  fitting(nodes, maxZoom) {
    const width = Math.max(1, this.cy.width() - 2 * FIT_PADDING);
    const height = Math.max(1, this.cy.height() - 2 * FIT_PADDING);
    const fits = (box) => Math.max(this.cy.minZoom(), Math.min(maxZoom, width / Math.max(1, box.w),
      height / Math.max(1, box.h)));
    const boxAt = (zoom) => {
      const eventsLabelled = this.labelsWanted(zoom);
      scaleLabels(this.cy, { eventsLabelled, zoom });
      return drawnBox(this.cy, { eventsLabelled, nodes });
    };
    let zoom = Math.min(1, maxZoom);
    let box = boxAt(zoom);
    if (!box) return { zoom: this.cy.zoom(), pan: this.cy.pan() };
    for (let round = 0; round < 8; round += 1) {
      const next = fits(box);
      const settled = Math.abs(next - zoom) < 0.005 * zoom;
      zoom = next;
      box = boxAt(zoom);
      if (settled) break;
    }
    zoom = Math.min(zoom, fits(box)); // the labels as large as this zoom makes them still fit
    return { zoom, pan: { x: this.cy.width() / 2 - zoom * (box.x1 + box.x2) / 2,
      y: this.cy.height() / 2 - zoom * (box.y1 + box.y2) / 2 } };
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

/** What the tooltip says about a node (its whole name) or an edge (its relation). */
function tooltipText(element) {
  return element.isNode() ? element.data("full") ?? element.data("label") : element.data("title");
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
 * side its label goes on and the room it may wrap in. On the ellipse a label points away from the middle (left of
 * a node on the left, above one at the top), so that neighbours' labels do not meet. */
function topicPlaces(keys, width, height) {
  const places = new Map();
  const n = keys.length;
  if (n === 1) {
    places.set(keys[0], { x: width / 2, y: height / 2, side: "below", room: Math.min(240, width * 0.6) });
  } else if (n <= 10) {
    const sideRoom = Math.min(200, width * 0.28);
    const rx = Math.max(40, width / 2 - sideRoom - 24);
    const ry = Math.max(40, height / 2 - 56);
    keys.forEach((key, i) => {
      const angle = -Math.PI / 2 + (2 * Math.PI * i) / n;
      const [cos, sin] = [Math.cos(angle), Math.sin(angle)];
      const sideways = Math.abs(cos) > 0.3;
      places.set(key, { x: width / 2 + rx * cos, y: height / 2 + ry * sin,
        side: sideways ? (cos > 0 ? "right" : "left") : (sin < 0 ? "above" : "below"),
        room: sideways ? sideRoom : Math.min(240, 2 * rx) });
    });
  } else {
    const columns = Math.ceil(Math.sqrt((n * width) / height));
    const rows = Math.ceil(n / columns);
    const cellWidth = width / columns;
    const cellHeight = height / rows;
    keys.forEach((key, i) => places.set(key, { x: (i % columns + 0.5) * cellWidth,
      y: (Math.floor(i / columns) + 0.35) * cellHeight, side: "below", room: Math.max(60, cellWidth - 14) }));
  }
  return places;
}

const LABEL_SIDES = {
  below: { "text-valign": "bottom", "text-halign": "center", "text-margin-x": 0, "text-margin-y": 3 },
  above: { "text-valign": "top", "text-halign": "center", "text-margin-x": 0, "text-margin-y": -3 },
  left: { "text-valign": "center", "text-halign": "left", "text-margin-x": -6, "text-margin-y": 0 },
  right: { "text-valign": "center", "text-halign": "right", "text-margin-x": 6, "text-margin-y": 0 },
};
