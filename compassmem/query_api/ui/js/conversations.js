// The Conversations panel: GET /v1/conversations, page by page, searchable, navigable with the keyboard.

import { clear, h } from "./dom.js";
import { formatDate, formatDateTime, plural } from "./format.js";
import { Listbox } from "./listbox.js";

const PAGE = 50;

export class ConversationList {
  /** onOpen(conversationId) when one is chosen; onError(ApiError). */
  constructor(api, { onOpen, onError }) {
    this.api = api;
    this.onError = onError;
    this.element = document.getElementById("conversation-list");
    this.more = document.getElementById("more-conversations");
    this.total = document.getElementById("conversation-total");
    this.search = document.getElementById("search");
    this.order = document.getElementById("order");
    this.cursor = null;
    this.openId = null;
    this.loading = null;
    this.listbox = new Listbox(this.element, { onSelect: (id, { open }) => open && onOpen(id) });
    let typing;
    this.search.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => this.reload(), 250);
    });
    document.getElementById("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.reload();
    });
    this.order.addEventListener("change", () => this.reload());
    document.getElementById("refresh").addEventListener("click", () => this.reload());
    this.more.addEventListener("click", () => this.load(false));
  }

  reload() {
    return this.load(true);
  }

  async load(fresh) {
    this.loading?.abort();
    const controller = new AbortController();
    this.loading = controller;
    try {
      const page = await this.api.get("/v1/conversations", { q: this.search.value.trim(), limit: PAGE,
        order: this.order.value, cursor: fresh ? null : this.cursor }, controller.signal);
      if (fresh) clear(this.element);
      this.element.append(...page.conversations.map((c) => this.item(c)));
      this.cursor = page.next_cursor;
      this.more.hidden = !page.next_cursor;
      this.total.textContent = `${plural(page.total, "conversation")}${this.search.value.trim() ? " found" : ""}`;
      if (!page.total) this.element.append(h("li", { class: "hint" }, this.search.value.trim()
        ? "No conversation matches." : "No memory yet: post turns to /v1/turns or run compassmem ingest."));
      if (this.openId) this.markOpen(this.openId);
    } catch (error) {
      if (!controller.signal.aborted) this.onError(error);
    }
  }

  item(c) {
    const when = c.last_at ? `updated ${formatDateTime(c.last_at)}` : "";
    return h("li", { role: "option", id: `conversation-${c.conversation_id}`, "aria-selected": "false",
      dataset: { value: c.conversation_id }, title: c.first_at ? `from ${formatDate(c.first_at)}` : null },
    h("div", { class: "title" }, c.conversation_id, " ",
      c.provisional_events > 0 && h("span", { class: "badge", title: "Being streamed: has an open segment" }, "live")),
    h("div", { class: "meta" }, `${plural(c.events, "event")} · ${plural(c.turns, "turn")}`),
    h("div", { class: "meta" }, when),
    (c.participants.length > 0 || c.subject_ids.length > 0) && h("div", { class: "meta" },
      [...c.participants, ...c.subject_ids.map((s) => `subject ${s}`)].join(", ")));
  }

  markOpen(id) {
    this.openId = id;
    this.listbox.highlightValue(id);
  }
}
