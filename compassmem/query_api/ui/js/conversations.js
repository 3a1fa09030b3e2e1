// The Conversations panel: GET /v1/conversations, page by page, searchable, navigable with the keyboard, and read
// again every few seconds while the page is shown, so that its counts follow a conversation being streamed.

import { clear, h } from "./dom.js";
import { formatDate, formatDateTime, plural } from "./format.js";
import { Listbox } from "./listbox.js";

const PAGE = 50;
const MAX_PAGE = 200; // the API's largest page: a refresh reads again up to this many of the items shown
const REFRESH_MS = 3000;
// "live": the conversation's turns grew within this long, as this page saw them. An open segment alone says
// nothing of the stream (it closes 120 s after the last turn), so it is counted, not badged.
const LIVE_FOR_MS = 10000;

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
    this.seen = new Map(); // conversation id -> { turns, grewAt }: what the last read said, when its turns grew
    this.read = false; // whether a first page has been read (a conversation new after it has just arrived)
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
    setInterval(() => this.refresh(), REFRESH_MS);
    document.addEventListener("visibilitychange", () => this.refresh());
  }

  reload() {
    return this.load(true);
  }

  /** The items shown read again in one request (none while the page is hidden or another read is under way). */
  refresh() {
    if (document.hidden || this.loading) return;
    const shown = this.element.querySelectorAll("[role=option]").length;
    this.load(true, { limit: Math.min(MAX_PAGE, Math.max(PAGE, shown)), quiet: true });
  }

  async load(fresh, { limit = PAGE, quiet = false } = {}) {
    this.loading?.abort();
    const controller = new AbortController();
    this.loading = controller;
    try {
      const page = await this.api.get("/v1/conversations", { q: this.search.value.trim(), limit,
        order: this.order.value, cursor: fresh ? null : this.cursor }, controller.signal);
      this.note(page.conversations);
      const scrolled = this.element.scrollTop;
      // The item the keyboard is on stays so across a read (else the open conversation's).
      const active = (quiet && this.listbox.items()[this.listbox.active]?.dataset.value) || this.openId;
      if (fresh) clear(this.element);
      this.element.append(...page.conversations.map((c) => this.item(c)));
      this.cursor = page.next_cursor;
      this.more.hidden = !page.next_cursor;
      this.total.textContent = `${plural(page.total, "conversation")}${this.search.value.trim() ? " found" : ""}`;
      if (!page.total) this.element.append(h("li", { class: "hint" }, this.search.value.trim()
        ? "No conversation matches." : "No memory yet: post turns to /v1/turns or run compassmem ingest."));
      if (active) this.listbox.highlightValue(active, { scroll: !quiet });
      if (quiet) this.element.scrollTop = scrolled;
    } catch (error) {
      if (!controller.signal.aborted && !quiet) this.onError(error);
    } finally {
      if (this.loading === controller) this.loading = null;
    }
  }

  /** Remembers the counts read, and when each conversation's turns last grew. */
  note(conversations) {
    const now = Date.now();
    for (const c of conversations) {
      const before = this.seen.get(c.conversation_id);
      const grew = before ? c.turns !== before.turns : this.read;
      this.seen.set(c.conversation_id, { turns: c.turns, grewAt: grew ? now : before?.grewAt ?? null });
    }
    this.read = true;
  }

  live(id) {
    const grewAt = this.seen.get(id)?.grewAt;
    return grewAt !== null && grewAt !== undefined && Date.now() - grewAt < LIVE_FOR_MS;
  }

  item(c) {
    const when = c.last_at ? `updated ${formatDateTime(c.last_at)}` : "";
    const open = c.provisional_events > 0 ? ` (${c.provisional_events} open)` : "";
    return h("li", { role: "option", id: `conversation-${c.conversation_id}`, "aria-selected": "false",
      dataset: { value: c.conversation_id, events: String(c.events), turns: String(c.turns) },
      title: c.first_at ? `from ${formatDate(c.first_at)}` : null },
    h("div", { class: "title" }, c.conversation_id, " ",
      this.live(c.conversation_id) && h("span", { class: "badge", title: "Turns arrived in the last few seconds" },
        "live")),
    h("div", { class: "meta counts", title: open ? "An open segment is an event still being built: it closes a " +
      "while after the last turn" : null }, `${plural(c.events, "event")}${open} · ${plural(c.turns, "turn")}`),
    h("div", { class: "meta" }, when),
    (c.participants.length > 0 || c.subject_ids.length > 0) && h("div", { class: "meta" },
      [...c.participants, ...c.subject_ids.map((s) => `subject ${s}`)].join(", ")));
  }

  markOpen(id) {
    this.openId = id;
    this.listbox.highlightValue(id);
  }
}
