// How the event graph looks (cytoscape.js styles). Which labels are shown, and at what size when the graph is
// zoomed out, is label-room.js's decision: no label here hides itself by the zoom.

// Font sizes (px at zoom 1) of the labels that keep a readable size on screen when the graph is zoomed out.
export const LABEL_FONTS = { topic: 15, anchor: 15, "lane-label": 14, axis: 12, major: 16, event: 13 };

export const STYLE = [
  { selector: "node[size]", style: { width: "data(size)", height: "data(size)" } },
  { selector: "node[color]", style: { "background-color": "data(color)" } },
  // A label on a white ground, so that it reads over the edges that cross it.
  { selector: "node", style: { label: "data(label)", "font-size": LABEL_FONTS.event, "text-wrap": "wrap",
    "text-max-width": 150, "text-valign": "bottom", "text-margin-y": 3, color: "#1d2430", "border-width": 1, "border-color": "#fff",
    "text-background-color": "#fff", "text-background-opacity": 0.85, "text-background-padding": 2,
    "text-background-shape": "round-rectangle" } },
  { selector: "node.label-hidden", style: { "text-opacity": 0 } },
  { selector: "node.neighbour", style: { "border-width": 2, "border-color": "#2457c5" } },
  { selector: "node.provisional", style: { "border-width": 3, "border-style": "dashed", "border-color": "#8a5a00",
    "background-opacity": 0.55 } },
  { selector: "node.topic", style: { shape: "round-rectangle", "font-weight": 600, "font-size": LABEL_FONTS.topic,
    "text-wrap": "none", "background-opacity": 0.85, "border-width": 2, "border-color": "#fff" } },
  // On the timeline the lane's name, on its left, names the topic.
  { selector: "node.topic.in-lane", style: { label: "" } },
  { selector: "node.unclustered", style: { "border-style": "dashed", "border-color": "#8c96a5" } },
  { selector: "node.lane", style: { shape: "round-rectangle", "background-opacity": 0.07,
    "border-color": "data(color)", "border-width": 1, "border-opacity": 0.5, label: "", padding: 14, events: "no",
    "compound-sizing-wrt-labels": "exclude" } },
  // A lane's name: a swatch of the topic's colour, its name on the left (cut short: whole in the tooltip).
  { selector: "node.lane-label", style: { shape: "round-rectangle", width: 12, height: 12, "border-width": 0,
    "text-halign": "left", "text-valign": "center", "text-margin-x": -6, "text-margin-y": 0, "text-wrap": "ellipsis",
    "font-size": LABEL_FONTS["lane-label"], "font-weight": 600 } },
  { selector: "node.anchor", style: { shape: "rectangle", width: 1, height: 1, "background-opacity": 0,
    "border-width": 0, "text-valign": "top", "font-size": LABEL_FONTS.anchor, "font-weight": 600, events: "no" } },
  { selector: "node.axis", style: { shape: "rectangle", width: 1, height: 1, "background-opacity": 0,
    "border-width": 0, "text-valign": "top", "text-wrap": "none", "font-size": LABEL_FONTS.axis, color: "#5b6575",
    events: "no" } },
  { selector: "edge", style: { width: "data(width)", "line-color": "data(color)", "target-arrow-color": "data(color)",
    "target-arrow-shape": "data(arrow)", "line-style": "data(lineStyle)", "curve-style": "bezier", opacity: 0.7,
    "arrow-scale": 0.8 } },
  { selector: "edge[label]", style: { label: "data(label)", "font-size": 12, "text-background-color": "#fff",
    "text-background-opacity": 0.9, "text-background-padding": 2 } },
  { selector: "edge.label-hidden", style: { "text-opacity": 0 } },
  { selector: "edge.link", style: { opacity: 0.55, "curve-style": "straight" } },
  { selector: "edge.focused", style: { opacity: 0.95 } },
  { selector: "edge.superseded", style: { "line-style": "dashed", opacity: 0.35, "target-arrow-shape": "tee" } },
  { selector: ".dimmed", style: { opacity: 0.18 } },
  // The evidence path: rings, and labels in a larger type (label-room.js shows them first).
  { selector: "node.seed", style: { "border-width": 5, "border-color": "#f0a400", "z-index": 20 } },
  { selector: "node.evidence", style: { "border-width": 4, "border-color": "#e0457b", "z-index": 19 } },
  { selector: "node.seed, node.evidence", style: { "font-size": LABEL_FONTS.major, "text-background-opacity": 0.92,
    "text-max-width": 220 } },
  { selector: "node.seed.evidence", style: { "border-color": "#f0a400", "outline-width": 3,
    "outline-color": "#e0457b" } },
  { selector: "edge.path", style: { "line-color": "#e0457b", "target-arrow-color": "#e0457b", width: 4, opacity: 1,
    "z-index": 30, "font-weight": 700, color: "#b0164f", "font-size": 16 } },
  { selector: "node.fresh", style: { "border-width": 6, "border-color": "#3ddc6a" } },
  { selector: "node:selected", style: { "border-width": 4, "border-color": "#2457c5", "z-index": 40,
    "font-weight": 600 } },
  // Under the pointer: a ring (the tooltip, tooltip.js, says what it is).
  { selector: "node.hover", style: { "underlay-color": "#2457c5", "underlay-opacity": 0.18, "underlay-padding": 5 } },
  { selector: "edge.hover", style: { opacity: 1, "underlay-color": "#2457c5", "underlay-opacity": 0.15,
    "underlay-padding": 3 } },
];
