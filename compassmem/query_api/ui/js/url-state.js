// What the page shows, kept in the URL's hash so that a reload, a bookmark or a shared link opens the same view:
//   #conversation=ID&event=ID&types=causal,temporal&min=0.7&links=30&topics=ID,ID&layout=force
// types: the relation types drawn; min: their minimum confidence; links: how many of the strongest links between
// topics; topics: the expanded topics (~none: the events without a topic); event: the selected event.

import { RELATION_TYPES } from "./format.js";

export const ALL_TYPES = Object.keys(RELATION_TYPES);
// Follow-ups link nearly every event to the next, shared participants nearly every event of a two-person chat:
// both off until asked for, so that the opening view shows the relations that say something.
export const DEFAULT_TYPES = ALL_TYPES.filter((type) => type !== "follow_up" && type !== "same_participant");
export const DEFAULT_MIN_CONFIDENCE = 0.7;
export const DEFAULT_LINKS = 30;
export const LINK_CHOICES = [10, 30, 100, 500];
export const LAYOUTS = ["force", "timeline"];

export function defaultView() {
  return { conversation: null, event: null, types: new Set(DEFAULT_TYPES), minConfidence: DEFAULT_MIN_CONFIDENCE,
    links: DEFAULT_LINKS, topics: new Set(), layout: LAYOUTS[0] };
}

/** The view the hash names (defaults for what it leaves out or gets wrong). */
export function readHash(hash = window.location.hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const view = defaultView();
  view.conversation = params.get("conversation") || null;
  view.event = params.get("event") || null;
  if (params.has("types")) {
    view.types = new Set(params.get("types").split(",").filter((type) => ALL_TYPES.includes(type)));
  }
  const min = Number.parseFloat(params.get("min"));
  if (Number.isFinite(min) && min >= 0 && min <= 1) view.minConfidence = min;
  const links = Number.parseInt(params.get("links"), 10);
  if (Number.isInteger(links) && links >= 1 && links <= 500) view.links = links;
  if (params.get("topics")) view.topics = new Set(params.get("topics").split(",").filter(Boolean));
  if (LAYOUTS.includes(params.get("layout"))) view.layout = params.get("layout");
  return view;
}

/** The hash of a view: the defaults are left out, so that a plain link stays short. */
export function hashOf(view) {
  const params = new URLSearchParams();
  if (view.conversation) params.set("conversation", view.conversation);
  if (view.event) params.set("event", view.event);
  const types = ALL_TYPES.filter((type) => view.types.has(type));
  if (types.join(",") !== DEFAULT_TYPES.join(",")) params.set("types", types.join(","));
  if (view.minConfidence !== DEFAULT_MIN_CONFIDENCE) params.set("min", String(view.minConfidence));
  if (view.links !== DEFAULT_LINKS) params.set("links", String(view.links));
  if (view.topics.size) params.set("topics", [...view.topics].join(","));
  if (view.layout !== LAYOUTS[0]) params.set("layout", view.layout);
  return `#${params.toString().replaceAll("%2C", ",").replaceAll("%7E", "~")}`;
}
