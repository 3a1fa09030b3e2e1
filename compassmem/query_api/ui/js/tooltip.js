// The graph's tooltip: what a node or an edge under the pointer is, in a box of its own (an opaque ground, kept
// inside the panel), since a label drawn on the canvas would cover its neighbours' labels.

import { h } from "./dom.js";

const OFFSET = 14;

export class Tooltip {
  /** `container`: the positioned element the graph is drawn in (the tooltip is laid over it). */
  constructor(container) {
    this.container = container;
    this.element = h("div", { class: "graph-tooltip", role: "tooltip", id: "graph-tooltip", hidden: true });
    container.append(this.element);
  }

  /** Shows `text` next to the point (x, y) of the graph element `graph` (page pixels relative to it). */
  show(text, graph, { x, y }) {
    if (!text) {
      this.hide();
      return;
    }
    this.element.textContent = text;
    this.element.hidden = false;
    const area = this.container.getBoundingClientRect();
    const frame = graph.getBoundingClientRect();
    const box = this.element.getBoundingClientRect();
    // Right of and below the pointer, else where it still fits in the panel.
    let left = frame.left - area.left + x + OFFSET;
    let top = frame.top - area.top + y + OFFSET;
    if (left + box.width > area.width - 4) left = Math.max(4, left - box.width - 2 * OFFSET);
    if (top + box.height > area.height - 4) top = Math.max(4, top - box.height - 2 * OFFSET);
    this.element.style.left = `${left}px`;
    this.element.style.top = `${top}px`;
  }

  hide() {
    this.element.hidden = true;
  }
}
