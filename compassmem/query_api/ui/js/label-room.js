// Which node labels the graph shows, and at what size. A label is shown only where it can be read: at 11 px or more
// on screen, wholly inside the panel, and clear of every label shown before it and of those labels' nodes, in order
// of importance (the selected event, an answer's events, topics, lane and group names, dates, then events, the
// larger first). The names of
// topics, lanes, groups and dates, the labels of the selected and an answer's events, and every event's when events
// are labelled at all (few drawn, or zoomed in), grow as the graph is zoomed out so as never to be drawn under
// READABLE_PX (up to MAX_SCALE times their size at zoom 1); what is hidden shows in the tooltip.

import { LABEL_FONTS } from "./graph-style.js";

const MIN_LABEL_PX = 11;
// Growing labels only as far as needed (not back to their size at zoom 1) keeps them from crowding each other.
const READABLE_PX = 12;
const MAX_SCALE = 4;
const LABEL_ONLY = { includeNodes: false, includeEdges: false, includeLabels: true, includeMainLabels: true,
  includeSourceLabels: false, includeTargetLabels: false, includeOverlays: false, includeUnderlays: false,
  includeOutlines: false };
const BODY_ONLY = { includeNodes: true, includeEdges: false, includeLabels: false, includeOverlays: false,
  includeUnderlays: false, includeOutlines: false };
const IMPORTANCE = { topic: 2, anchor: 3, "lane-label": 3, axis: 4, event: 5 };

/** The size (px at zoom 1) of a label that keeps its size on screen, or null for one that is not shown. */
function steadyFont(node, eventsLabelled) {
  const kind = node.data("kind");
  if (kind !== "event") return LABEL_FONTS[kind] ?? null;
  if (node.selected() || node.hasClass("seed") || node.hasClass("evidence")) return LABEL_FONTS.major;
  return eventsLabelled ? LABEL_FONTS.event : null;
}

/** Labels that may be shown: events' only when `eventsLabelled` (few drawn, or zoomed in) or major; none of the
 * dimmed rest of an answer's graph. */
function wanted(node, eventsLabelled) {
  return Boolean(node.style("label")) && !node.hasClass("dimmed") && steadyFont(node, eventsLabelled) !== null;
}

function importance(node) {
  if (node.selected()) return 0;
  if (node.hasClass("seed") || node.hasClass("evidence")) return 1;
  return IMPORTANCE[node.data("kind")] ?? 6;
}

function byImportance(a, b) {
  return importance(a) - importance(b) ||
    (b.data("events") ?? b.data("turns") ?? 0) - (a.data("events") ?? a.data("turns") ?? 0) ||
    a.position("x") - b.position("x") || a.position("y") - b.position("y");
}

/** Labels sized for `zoom` (the graph's, or one a fit is trying). */
export function scaleLabels(cy, { eventsLabelled, zoom = cy.zoom() }) {
  cy.batch(() => cy.nodes().forEach((node) => {
    const font = steadyFont(node, eventsLabelled);
    const width = node.data("kind") === "lane-label" ? laneNameWidth(cy.width()) : null;
    if (font !== null) {
      const scale = Math.min(MAX_SCALE, Math.max(1, READABLE_PX / (font * zoom)));
      node.style(width ? { "font-size": font * scale, "text-max-width": width * scale } : { "font-size": font * scale });
      node.scratch("_steady", true);
    } else if (node.scratch("_steady")) {
      node.removeStyle("font-size");
      node.scratch("_steady", false);
    }
  }));
}

/** Shows the labels that fit (see above) and hides the rest. */
export function placeLabels(cy, { eventsLabelled }) {
  scaleLabels(cy, { eventsLabelled });
  const zoom = cy.zoom();
  const width = cy.width();
  const height = cy.height();
  const taken = []; // the labels shown and their nodes
  const kept = new Set();
  for (const node of cy.nodes().filter((n) => wanted(n, eventsLabelled)).sort(byImportance)) {
    if (node.numericStyle("font-size") * zoom < MIN_LABEL_PX) continue;
    const box = node.renderedBoundingBox(LABEL_ONLY);
    const body = node.renderedBoundingBox(BODY_ONLY);
    if (box.x1 < 0 || box.y1 < 0 || box.x2 > width || box.y2 > height) continue;
    if (taken.some((other) => overlaps(box, other) || overlaps(body, other))) continue;
    taken.push(box, body);
    kept.add(node.id());
  }
  cy.batch(() => {
    cy.nodes().forEach((node) => node.toggleClass("label-hidden", !kept.has(node.id())));
    // Edges' labels (counts, an answer's steps) only at a size that reads.
    cy.edges("[label]").forEach((edge) => edge.toggleClass("label-hidden",
      edge.numericStyle("font-size") * zoom < MIN_LABEL_PX));
  });
}

/** The model-space box of `nodes` (all when null) as drawn: their bodies, the labels they may show, and the edges
 * between them. */
export function drawnBox(cy, { eventsLabelled, nodes = null }) {
  const chosen = nodes ?? cy.nodes();
  const box = { x1: Infinity, y1: Infinity, x2: -Infinity, y2: -Infinity };
  const grow = (b) => {
    if (!(b.w > 0 || b.h > 0)) return;
    box.x1 = Math.min(box.x1, b.x1);
    box.y1 = Math.min(box.y1, b.y1);
    box.x2 = Math.max(box.x2, b.x2);
    box.y2 = Math.max(box.y2, b.y2);
  };
  chosen.forEach((node) => {
    grow(node.boundingBox(BODY_ONLY));
    if (wanted(node, eventsLabelled)) grow(node.boundingBox(LABEL_ONLY));
  });
  if (!nodes) grow(cy.edges().boundingBox({ includeLabels: false, includeOverlays: false, includeUnderlays: false }));
  return Number.isFinite(box.x1) ? { ...box, w: box.x2 - box.x1, h: box.y2 - box.y1 } : null;
}

/** How wide (px on screen) a lane's name may be before it is cut short: a quarter of the panel, within limits. */
export function laneNameWidth(panelWidth) {
  return Math.max(110, Math.min(220, panelWidth * 0.26));
}

function overlaps(a, b) {
  return a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
}
