// A conversation as the page holds it: its overview (GET .../overview: topics with their counts, the strongest links
// between them) and the parts loaded on demand (GET .../graph?topic=&event=: a topic's events, an event with every
// relation around it), kept current by live changes. A large conversation is never loaded whole.

// The key of the events without a topic yet (the overview's topic with id null).
export const NO_TOPIC = "~none";

export class GraphModel {
  constructor(conversationId) {
    this.conversationId = conversationId;
    this.overview = null;
    this.topics = new Map(); // key -> { key, id, label, keywords, events, turns, first_at, last_at }
    this.events = new Map(); // id -> node (kind "event"): the events loaded so far
    this.edges = new Map(); // relation id -> edge: every relation of the events loaded, as far as loaded
    this.loadedTopics = new Set(); // topic keys whose events are all loaded (within the server limits)
  }

  /** A new overview (a conversation opened, the filters changed, topics changed live). */
  setOverview(overview) {
    this.overview = overview;
    const topics = new Map();
    for (const topic of overview.topics) {
      const key = topic.id ?? NO_TOPIC;
      topics.set(key, { ...topic, key });
    }
    // Topics met in loaded parts or live changes but not in the overview yet keep their place after the others.
    for (const [key, topic] of this.topics) if (!topics.has(key) && topic.fromGraph) topics.set(key, topic);
    this.topics = topics;
  }

  /** Adds a loaded part (a LimitedConversationGraph). */
  merge(graph) {
    for (const node of graph.nodes) this.upsertNode(node);
    for (const edge of graph.edges) this.upsertEdge(edge);
  }

  upsertNode(node) {
    if (node.kind === "cluster") {
      if (!this.topics.has(node.id)) {
        this.topics.set(node.id, { key: node.id, id: node.id, label: shortTopicLabel(node.label), keywords: [],
          events: node.members.length, turns: 0, first_at: null, last_at: null, fromGraph: true });
      }
      // A topic lists the members its writer holds: they join it; earlier members keep their topic.
      for (const member of node.members) {
        const event = this.events.get(member);
        if (event) event.cluster_id = node.id;
      }
      return false;
    }
    const known = this.events.has(node.id);
    this.events.set(node.id, node);
    return !known;
  }

  upsertEdge(edge) {
    this.edges.set(edge.id, edge);
  }

  removeEvent(id) {
    this.events.delete(id);
    for (const [key, edge] of this.edges) {
      if (edge.source === id || edge.target === id) this.edges.delete(key);
    }
  }

  clear() {
    this.events.clear();
    this.edges.clear();
    this.topics.clear();
    this.loadedTopics.clear();
  }

  /** The topic key an event is drawn under. */
  topicOf(event) {
    return event.cluster_id ?? NO_TOPIC;
  }

  /** Events loaded (not stubs) in time order. */
  orderedEvents() {
    return [...this.events.values()].filter((e) => !e.stub).sort(byStart);
  }

  eventCount() {
    let count = 0;
    for (const event of this.events.values()) if (!event.stub) count += 1;
    return count;
  }

  /** The conversation's events and relations (the overview's counts), whatever is loaded. */
  totals() {
    const counts = this.overview?.counts;
    return { events: counts?.events ?? this.eventCount(), relations: counts?.relations ?? this.edges.size,
      topics: counts?.topics ?? this.topics.size };
  }

  /** Topics in the order of their first event (the overview's), for stable lanes and colours; no topic last. */
  topicOrder() {
    const order = new Map();
    for (const key of this.topics.keys()) if (key !== NO_TOPIC) order.set(key, order.size);
    if (this.topics.has(NO_TOPIC)) order.set(NO_TOPIC, -1);
    return order;
  }

  topicLabel(key) {
    return this.topics.get(key)?.label ?? key;
  }

  relationsOf(id) {
    return [...this.edges.values()].filter((e) => e.source === id || e.target === id);
  }

  eventOfTurn(turnId) {
    for (const event of this.events.values()) if (event.turn_ids.includes(turnId)) return event;
    return null;
  }
}

export function byStart(a, b) {
  return (a.start ?? "").localeCompare(b.start ?? "") || a.id.localeCompare(b.id);
}

function shortTopicLabel(label) {
  return label.split(", ").slice(0, 3).join(", ");
}
