// A conversation's graph as the page holds it: loaded from GET .../graph, kept current by live changes.

export class GraphModel {
  constructor(graph) {
    this.conversationId = graph.conversation_id;
    this.limits = graph.limits;
    this.events = new Map(); // id -> node (kind "event"; stub ones are relation endpoints not arrived yet)
    this.topics = new Map(); // id -> node (kind "cluster")
    this.edges = new Map(); // relation id -> edge
    for (const node of graph.nodes) this.upsertNode(node);
    for (const edge of graph.edges) this.upsertEdge(edge);
  }

  upsertNode(node) {
    if (node.kind === "cluster") {
      this.topics.set(node.id, node);
      // A topic lists the members its writer holds: they join it; earlier members keep their topic.
      for (const member of node.members) {
        const event = this.events.get(member);
        if (event) event.cluster_id = node.id;
      }
      return;
    }
    this.events.set(node.id, node);
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

  /** Events (not stubs) in time order. */
  orderedEvents() {
    return [...this.events.values()].filter((e) => !e.stub).sort(byStart);
  }

  eventCount() {
    let count = 0;
    for (const event of this.events.values()) if (!event.stub) count += 1;
    return count;
  }

  /** Topics in the order of their first event, for stable lanes and colours. */
  topicOrder() {
    const first = new Map();
    for (const event of this.orderedEvents()) {
      if (event.cluster_id && this.topics.has(event.cluster_id) && !first.has(event.cluster_id)) {
        first.set(event.cluster_id, first.size);
      }
    }
    for (const id of this.topics.keys()) if (!first.has(id)) first.set(id, first.size);
    return first;
  }

  topicLabel(id) {
    return this.topics.get(id)?.label ?? id;
  }

  relationsOf(id) {
    return [...this.edges.values()].filter((e) => e.source === id || e.target === id);
  }

  eventOfTurn(turnId) {
    for (const event of this.events.values()) if (event.turn_ids.includes(turnId)) return event;
    return null;
  }

  timeBounds() {
    const events = this.orderedEvents();
    if (!events.length) return null;
    return { start: events[0].start, end: events.reduce((end, e) => (e.end > end ? e.end : end), events[0].end) };
  }
}

export function byStart(a, b) {
  return (a.start ?? "").localeCompare(b.start ?? "") || a.id.localeCompare(b.id);
}
