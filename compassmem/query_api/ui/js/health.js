// The Health panel: GET /v1/health/memory, the tenant's memory health at a glance (what the Prometheus metrics carry,
// without Grafana): per conversation events, relations, graph degree, duplicate rate and relation-confidence drift,
// the tenant's totals, the worker's lag and dead letters, each with a sparkline of its last samples. Read again every
// REFRESH_MS while the panel is shown.

import { clear, h } from "./dom.js";
import { formatDateTime, plural } from "./format.js";

const REFRESH_MS = 10000;
const SVG = "http://www.w3.org/2000/svg";
const SPARK_WIDTH = 72;
const SPARK_HEIGHT = 18;

export class HealthPanel {
  /** onOpen(conversationId) when a conversation's name is pressed; onError(ApiError). */
  constructor(element, { onOpen, onError }) {
    this.element = element;
    this.onOpen = onOpen;
    this.onError = onError;
    this.api = null;
    this.visible = false;
    this.timer = null;
    this.loading = null;
  }

  /** The panel was shown (true) or hidden: read now and every REFRESH_MS while shown. */
  shown(visible) {
    this.visible = visible;
    clearInterval(this.timer);
    if (!visible) return;
    this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  async refresh() {
    if (!this.api || !this.visible) return;
    this.loading?.abort();
    const controller = new AbortController();
    this.loading = controller;
    try {
      const report = await this.api.get("/v1/health/memory", { limit: 20 }, controller.signal);
      if (!controller.signal.aborted) this.render(report);
    } catch (error) {
      if (!controller.signal.aborted) this.onError(error);
    }
  }

  render(report) {
    const totals = report.totals;
    clear(this.element).append(
      h("p", { class: "hint", id: "health-sampled" }, `Tenant ${report.tenant} at ${formatDateTime(report.sampled_at)}; ` +
        `trends: one sample per ${report.sample_every_s} s at most, the last ${report.samples_kept} kept by the API.`),
      h("div", { class: "health-totals", id: "health-totals" },
        figure("conversations", totals.conversations.toLocaleString(), totals.trend.series.conversations),
        figure("events", totals.events.toLocaleString(), totals.trend.series.events),
        figure("turns", totals.turns.toLocaleString(), totals.trend.series.turns)),
      h("h3", {}, "Worker"),
      worker(report.worker),
      h("h3", {}, `Conversations (${report.conversations.length} of ${report.conversations_total}, most recent first)`),
      report.conversations.length
        ? h("ul", { class: "health-conversations", id: "health-conversations" },
          report.conversations.map((c) => this.conversation(c)))
        : h("p", { class: "hint" }, "No memory yet."),
    );
    this.element.dataset.sampledAt = report.sampled_at;
  }

  conversation(c) {
    const series = c.trend.series;
    return h("li", { class: c.warnings.length ? "health-card warn" : "health-card", dataset: { conversation: c.conversation_id } },
      h("div", { class: "health-card-head" },
        h("button", { type: "button", class: "linkish", onclick: () => this.onOpen(c.conversation_id) },
          c.conversation_id),
        h("span", { class: "meta" }, c.last_at ? `last turn ${formatDateTime(c.last_at)}` : "")),
      h("div", { class: "health-figures" },
        figure("events", `${c.events.toLocaleString()}${c.provisional_events ? ` +${c.provisional_events} open` : ""}`,
          series.events, { name: "events" }),
        figure("relations", c.relations.toLocaleString(), series.relations, { name: "relations",
          title: `${c.semantic_relations} without adjacency edges, ${c.superseded_relations} superseded` }),
        figure("avg degree", c.average_degree.toFixed(2), series.average_degree, { name: "average_degree",
          title: `without adjacency edges ${c.semantic_degree.toFixed(2)}; below 1.5 the alert fires` }),
        figure("duplicates", `${(100 * c.duplicate_rate).toFixed(1)}%`, series.duplicate_rate, { name: "duplicate_rate",
          title: `${c.merged_segments} of ${c.segments} segments merged; above 15% the alert fires` }),
        figure("conf. drift", c.confidence_drift === null ? "–" : signed(c.confidence_drift), series.confidence_drift,
          { name: "confidence_drift", title: c.confidence_mean === null ? "no semantic relations yet"
            : `mean confidence ${c.confidence_mean.toFixed(3)}, of the latest ${c.confidence_recent_mean.toFixed(3)}` })),
      c.warnings.length > 0 && h("ul", { class: "health-warnings" }, c.warnings.map((w) => h("li", {}, w))));
  }
}

function worker(w) {
  if (!w.in_process) return h("p", { class: "hint", id: "health-worker" }, `No worker figures: ${w.note}.`);
  const series = w.trend.series;
  const letters = Object.entries(w.dead_letters_by_reason).map(([kind, n]) => `${kind} ${n}`).join(", ");
  return h("div", { id: "health-worker" },
    h("div", { class: "health-figures" },
      figure("lag", plural(w.lag_records, "record"), series.lag_records, { name: "lag_records",
        title: Object.entries(w.lag_partitions).map(([p, n]) => `${p}: ${n}`).join(", ") || "no partition assigned" }),
      figure("dead letters", w.dead_letters.toLocaleString(), series.dead_letters, { name: "dead_letters",
        title: letters || "none" }),
      figure("conf. drift", w.confidence_drift === null ? "–" : signed(w.confidence_drift), series.confidence_drift,
        { name: "confidence_drift", title: w.confidence_trend_per_1000 === null ? "too few relations yet"
          : `trend ${signed(w.confidence_trend_per_1000)} per 1,000 relations over ${plural(w.relations_seen, "relation")}` })),
    h("p", { class: "meta" }, w.last_batch_at ? `last batch ${formatDateTime(w.last_batch_at)}` : "no batch yet"),
    w.warnings.length > 0 && h("ul", { class: "health-warnings" }, w.warnings.map((text) => h("li", {}, text))));
}

function signed(value) {
  return `${value >= 0 ? "+" : ""}${value.toFixed(3)}`;
}

function figure(label, value, values, { name = label, title = null } = {}) {
  return h("div", { class: "health-figure", dataset: { figure: name }, title },
    h("span", { class: "label" }, label), h("strong", { class: "value" }, value), sparkline(values ?? []));
}

/** The samples as a line from the lowest (bottom) to the highest (top); a flat series is a line across the middle. */
export function sparkline(values) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "sparkline");
  svg.setAttribute("viewBox", `0 0 ${SPARK_WIDTH} ${SPARK_HEIGHT}`);
  svg.setAttribute("width", String(SPARK_WIDTH));
  svg.setAttribute("height", String(SPARK_HEIGHT));
  svg.setAttribute("role", "img");
  const present = values.filter((v) => v !== null);
  svg.dataset.samples = String(present.length);
  svg.setAttribute("aria-label", present.length ? `last ${present.length} samples, from ${present[0]} to ` +
    `${present[present.length - 1]}` : "no samples yet");
  if (!present.length) return svg;
  const low = Math.min(...present);
  const high = Math.max(...present);
  const step = values.length > 1 ? (SPARK_WIDTH - 4) / (values.length - 1) : 0;
  const y = (v) => (high - low < 1e-12 ? SPARK_HEIGHT / 2 : 2 + (SPARK_HEIGHT - 4) * (1 - (v - low) / (high - low)));
  const points = values.map((v, i) => (v === null ? null : `${(2 + i * step).toFixed(1)},${y(v).toFixed(1)}`))
    .filter(Boolean);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.length === 1 ? `2,${y(present[0])} ${SPARK_WIDTH - 2},${y(present[0])}` : points.join(" "));
  svg.append(line);
  const last = document.createElementNS(SVG, "circle");
  const [lx, ly] = points[points.length - 1].split(",");
  last.setAttribute("cx", points.length === 1 ? String(SPARK_WIDTH - 2) : lx);
  last.setAttribute("cy", ly);
  last.setAttribute("r", "2");
  svg.append(last);
  return svg;
}
