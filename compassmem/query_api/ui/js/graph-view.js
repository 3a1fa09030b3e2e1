// The event graph on screen (cytoscape.js): styles, layouts, selection, the highlighted evidence path, new nodes.

import cytoscape from "../vendor/cytoscape.esm.min.js";
import { axisMarkers, graphElements, timelinePositions } from "./graph-elements.js";

const FRESH_MS = 4000;

const STYLE = [
  { selector: "node[size]", style: { width: "data(size)", height: "data(size)" } },
  { selector: "node[color]", style: { "background-color": "data(color)" } },
  { selector: "node", style: { label: "data(label)", "font-size": 10, "text-wrap": "wrap", "text-max-width": 140,
    "text-valign": "bottom",
    "text-margin-y": 3, color: "#1d2430", "min-zoomed-font-size": 9, "border-width": 1, "border-color": "#fff" } },
  { selector: "node.provisional", style: { "border-width": 3, "border-style": "dashed", "border-color": "#8a5a00",
    "background-opacity": 0.55 } },
  { selector: "node.stub", style: { "background-color": "#fff", "border-width": 1, "border-color": "#8c96a5",
    "border-style": "dotted" } },
  { selector: "node.topic", style: { shape: "round-rectangle", "font-weight": 600, "text-valign": "center",
    color: "#fff", "text-outline-color": "data(color)", "text-outline-width": 2, "font-size": 11 } },
  { selector: "node.hub", style: { shape: "diamond", color: "#1d2430", "text-outline-width": 0,
    "text-valign": "bottom" } },
  { selector: "node.lane", style: { shape: "round-rectangle", "background-opacity": 0.07,
    "border-color": "data(color)", "border-width": 1, "border-opacity": 0.5,
    label: "data(label)", "text-valign": "top", "text-halign": "left", "text-rotation": 0, "font-size": 11,
    "text-margin-x": 60, color: "data(color)", "font-weight": 600, padding: 14, events: "no" } },
  { selector: "node.axis", style: { shape: "rectangle", width: 1, height: 1, "background-opacity": 0,
    "border-width": 0, label: "data(label)", "text-valign": "top", "font-size": 11, color: "#5b6575",
    "min-zoomed-font-size": 0, events: "no" } },
  { selector: "edge", style: { width: "data(width)", "line-color": "data(color)", "target-arrow-color": "data(color)",
    "target-arrow-shape": "data(arrow)", "line-style": "data(lineStyle)", "curve-style": "bezier", opacity: 0.75,
    "arrow-scale": 0.8 } },
  { selector: "edge[label]", style: { label: "data(label)", "font-size": 10, "text-background-color": "#fff",
    "text-background-opacity": 0.9, "text-background-padding": 2 } },
  { selector: "edge.superseded", style: { "line-style": "dashed", opacity: 0.35, "target-arrow-shape": "tee" } },
  { selector: ".dimmed", style: { opacity: 0.18 } },
  // The evidence path stays readable when the whole graph is in view: its labels ignore the zoom threshold.
  { selector: "node.seed", style: { "border-width": 5, "border-color": "#f0a400", "z-index": 20 } },
  { selector: "node.evidence", style: { "border-width": 4, "border-color": "#e0457b", "z-index": 19 } },
  { selector: "node.seed, node.evidence", style: { "min-zoomed-font-size": 0, "font-size": 18,
    "text-background-color": "#fff", "text-background-opacity": 0.85, "text-max-width": 260 } },
  { selector: "node.seed.evidence", style: { "border-color": "#f0a400", "outline-width": 3,
    "outline-color": "#e0457b" } },
  { selector: "edge.path", style: { "line-color": "#e0457b", "target-arrow-color": "#e0457b", width: 4, opacity: 1,
    "z-index": 30, "font-weight": 700, color: "#b0164f", "font-size": 20, "min-zoomed-font-size": 0 } },
  { selector: "node.fresh", style: { "border-width": 6, "border-color": "#3ddc6a" } },
  { selector: "node:selected", style: { "border-width": 4, "border-color": "#2457c5", "z-index": 40 } },
];

export class GraphView {
  /** onSelect(eventId | null) when an event is clicked (null: the background); onTopic(topicId) for topics. */
  constructor(container, { onSelect, onTopic }) {
    this.container = container;
    this.cy = cytoscape({ container, style: STYLE, minZoom: 0.02, maxZoom: 4, boxSelectionEnabled: false });
    this.fresh = new Map();
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
      const layout = this.cy.layout({ name: "cose", animate: false, randomize: true, nodeRepulsion: () => 9000,
        idealEdgeLength: () => 70, numIter: 1200, fit: true, padding: 24 });
      layout.run();
    } else if (relayout) {
      this.fit();
    }
    return elements;
  }

  fit() {
    this.cy.fit(this.cy.elements(), 24);
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
