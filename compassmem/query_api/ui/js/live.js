// Live updates of the open conversation: GET .../live (server-sent events), resumed with Last-Event-ID.

const MAX_BACKOFF_MS = 10000;

export class LiveStream {
  /**
   * handlers: ready() once changes from now on will follow (load the graph then), change(LiveChange),
   * state(name, text, why) for the status line (why: its longer story), refused(ApiError) when the API turns the key
   * away.
   */
  constructor(api, conversationId, handlers) {
    this.api = api;
    this.path = `/v1/conversations/${encodeURIComponent(conversationId)}/live`;
    this.handlers = handlers;
    this.controller = new AbortController();
    this.lastId = null;
  }

  stop() {
    this.controller.abort();
  }

  async run() {
    let backoff = 500;
    while (!this.controller.signal.aborted) {
      let ended = "done";
      try {
        await this.api.stream(this.path, { lastEventId: this.lastId, signal: this.controller.signal,
          onEvent: (message) => { ended = this.dispatch(message) ?? ended; } });
        backoff = 500;
      } catch (error) {
        if (this.controller.signal.aborted) return;
        if (error.refused) {
          this.handlers.state("error", "Live: refused");
          this.handlers.refused(error);
          return;
        }
        this.handlers.state("connecting", "Live: reconnecting…");
        await sleep(backoff, this.controller.signal);
        backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
        continue;
      }
      if (ended === "unavailable") return;
      if (ended === "resync") this.lastId = null;
    }
  }

  dispatch({ event, data, id }) {
    if (id) this.lastId = id;
    if (event === "ready") {
      this.handlers.state("on", "Live: on");
      // Only a new stream (no Last-Event-ID) needs the graph loaded; a resumed one got what it missed.
      if (id) this.handlers.ready();
    } else if (event === "change") {
      this.handlers.change(data);
    } else if (event === "resync") {
      this.handlers.state("connecting", "Live: catching up…");
      return "resync";
    } else if (event === "unavailable") {
      this.handlers.state("off", "Live: off", data.reason);
      this.handlers.ready();
      return "unavailable";
    }
    return null;
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}
