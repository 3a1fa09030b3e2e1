// The query API from the page: the tenant and key on every request, refusals turned into messages a person can act on.

export class ApiError extends Error {
  /** kind: unauthorized (401), forbidden (403), not-found (404), invalid (422), unavailable (503), unreachable,
   *  server (other 5xx), other. */
  constructor(kind, status, message) {
    super(message);
    this.kind = kind;
    this.status = status;
  }

  get refused() {
    return this.kind === "unauthorized" || this.kind === "forbidden";
  }
}

const KINDS = { 401: "unauthorized", 403: "forbidden", 404: "not-found", 422: "invalid", 503: "unavailable" };

function explain(status, detail, tenant) {
  const said = Array.isArray(detail) ? detail.map((d) => `${d.field}: ${d.message}`).join("; ") : detail;
  switch (status) {
    case 401: return `The API refused: tenant "${tenant}" needs an API key (${said}). Enter it with “Tenant and key…”.`;
    case 403: return `The API refused the key for tenant "${tenant}" (${said}). Enter the right one with “Tenant and key…”.`;
    case 404: return `Not found: ${said}.`;
    case 422: return `The API refused the request: ${said}.`;
    case 503: return `The API is unavailable for this request: ${said}.`;
    default: return `The API answered ${status}: ${said || "no detail"}.`;
  }
}

export class Api {
  constructor({ tenant, key }) {
    this.tenant = tenant;
    this.key = key;
  }

  headers(extra = {}) {
    return this.key ? { Authorization: `Bearer ${this.key}`, ...extra } : extra;
  }

  url(path, params = {}) {
    const url = new URL(path, window.location.origin);
    url.searchParams.set("tenant", this.tenant);
    for (const [name, value] of Object.entries(params)) {
      if (Array.isArray(value)) {
        for (const item of value) url.searchParams.append(name, item); // a list parameter: repeated
      } else if (value !== null && value !== undefined && value !== "") {
        url.searchParams.set(name, value);
      }
    }
    return url;
  }

  async send(url, init) {
    let response;
    try {
      response = await fetch(url, init);
    } catch (error) {
      if (init?.signal?.aborted) throw error;
      throw new ApiError("unreachable", 0, `The API at ${window.location.origin} cannot be reached (is compassmem ` +
        `running?): ${error.message}`);
    }
    if (response.ok) return response;
    let detail = response.statusText;
    try {
      detail = (await response.json()).detail ?? detail;
    } catch { /* not JSON: keep the status text */ }
    const kind = KINDS[response.status] ?? (response.status >= 500 ? "server" : "other");
    throw new ApiError(kind, response.status, explain(response.status, detail, this.tenant));
  }

  async get(path, params = {}, signal = undefined) {
    const response = await this.send(this.url(path, params), { headers: this.headers(), signal });
    return response.json();
  }

  async post(path, body, signal = undefined) {
    const response = await this.send(this.url(path), {
      method: "POST", signal, headers: this.headers({ "Content-Type": "application/json" }),
      body: JSON.stringify({ tenant: this.tenant, ...body }),
    });
    return response.json();
  }

  /** Server-sent events through fetch (EventSource cannot send the key): calls onEvent({event, data, id}) per event
   *  until the server ends the stream or `signal` aborts it. */
  async stream(path, { lastEventId = null, signal, onEvent }) {
    const headers = this.headers({ Accept: "text/event-stream", ...(lastEventId ? { "Last-Event-ID": lastEventId } : {}) });
    const response = await this.send(this.url(path), { headers, signal, cache: "no-store" });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const message = { event: "message", data: "", id: null };
        for (const line of block.split("\n")) {
          const colon = line.indexOf(":");
          if (colon <= 0) continue; // comments and malformed lines
          const field = line.slice(0, colon);
          const text = line.slice(colon + 1).replace(/^ /, "");
          if (field === "data") message.data += text;
          else if (field === "event") message.event = text;
          else if (field === "id") message.id = text;
        }
        onEvent({ ...message, data: message.data ? JSON.parse(message.data) : null });
      }
    }
  }
}
