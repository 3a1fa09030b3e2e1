/**
 * `Client`: the verbs of compassmem's Python `Client` over the HTTP API (`compassmem dev` or `compassmem api`),
 * on the platform's `fetch`.
 *
 * Answers are the API's own records (`QueryResponse`, `ConversationPage`, ...); failures throw the classes of
 * `errors.ts`. Requests are not validated here: the server is the one authority on its rules, whatever its version,
 * and its 422 names the field that broke one.
 */

import { CompassmemError, Unavailable, errorOf } from "./errors.js";
import type {
  ChatMessageInput,
  ConversationPage,
  ConversationSummary,
  ConversationsOptions,
  DeleteResult,
  EventOut,
  EventPage,
  EventsOptions,
  ConversationOverview,
  GraphNode,
  GraphOptions,
  LimitedConversationGraph,
  MemoryHealth,
  MemoryHealthOptions,
  OverviewOptions,
  QueryInput,
  QueryOptions,
  QueryResponse,
  RedactResult,
  TenantDeleteResult,
  TenantOption,
  TurnInput,
  TurnsAccepted,
} from "./types.js";

export const DEFAULT_TIMEOUT_MS = 30_000;

export interface ClientOptions {
  /** The tenant's API key (`COMPASSMEM_API_KEYS`), or an admin key for `deleteTenant`; sent as
   * `Authorization: Bearer <key>`. */
  apiKey?: string | undefined;
  /** Milliseconds a request may take, answer body included (default 30 000); past it, `Unavailable`. */
  timeoutMs?: number | undefined;
  /** A `fetch` to send requests with (default: the platform's). */
  fetch?: typeof globalThis.fetch | undefined;
}

type Params = Record<string, string | number | boolean | Date | readonly (string | number)[] | null | undefined>;

interface Call {
  method: "GET" | "POST" | "DELETE";
  path: string;
  params?: Params | undefined;
  body?: unknown;
}

export class Client {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof globalThis.fetch;

  /** `baseUrl`: where the API answers, e.g. "http://127.0.0.1:8080" (a path prefix is kept). */
  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#apiKey = options.apiKey;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** Append turns or chat messages to the turns topic (`POST /v1/turns`); the worker makes them queryable shortly
   * after. One turn goes as one object, so its errors name plain fields ("timestamp"), a list's their index
   * ("[0].timestamp"). */
  add(turns: TurnInput | ChatMessageInput | readonly (TurnInput | ChatMessageInput)[]): Promise<TurnsAccepted> {
    return this.#send({ method: "POST", path: "/v1/turns", body: turns });
  }

  /** Ask a question (`POST /v1/query`): the question and its fields (one scope: `conversation_id`,
   * `conversation_ids`, `subject_id` or `all_conversations: true`), or a whole request. */
  query(question: string, options?: QueryOptions): Promise<QueryResponse>;
  query(request: QueryInput): Promise<QueryResponse>;
  query(question: string | QueryInput, options: QueryOptions = {}): Promise<QueryResponse> {
    const body = typeof question === "string" ? { ...options, question } : question;
    return this.#send({ method: "POST", path: "/v1/query", body });
  }

  /** One event with its source turns (`GET /v1/events/{id}`). */
  event(eventId: string, options: TenantOption = {}): Promise<EventOut> {
    return this.#send({ method: "GET", path: `/v1/events/${segment(eventId)}`, params: options });
  }

  /** One page of the tenant's conversations (`GET /v1/conversations`); pass its `next_cursor` as `cursor` for the
   * next page, or use `allConversations`. */
  conversations(options: ConversationsOptions = {}): Promise<ConversationPage> {
    return this.#send({ method: "GET", path: "/v1/conversations", params: options });
  }

  /** Every conversation of the tenant, page after page (`limit` per request). */
  async *allConversations(options: Omit<ConversationsOptions, "cursor"> = {}): AsyncGenerator<ConversationSummary> {
    let cursor: string | null | undefined;
    do {
      const page = await this.conversations({ ...options, cursor });
      yield* page.conversations;
      cursor = page.next_cursor;
    } while (cursor);
  }

  /** One page of a conversation's events in time order (`GET /v1/conversations/{id}/events`). */
  events(conversationId: string, options: EventsOptions = {}): Promise<EventPage> {
    return this.#send({
      method: "GET",
      path: `/v1/conversations/${segment(conversationId)}/events`,
      params: options,
    });
  }

  /** Every event of a conversation in time order, page after page (`limit` per request). */
  async *allEvents(conversationId: string, options: Omit<EventsOptions, "cursor"> = {}): AsyncGenerator<GraphNode> {
    let cursor: string | null | undefined;
    do {
      const page = await this.events(conversationId, { ...options, cursor });
      yield* page.events;
      cursor = page.next_cursor;
    } while (cursor);
  }

  /** A conversation's event graph (`GET /v1/conversations/{id}/graph`). */
  graph(conversationId: string, options: GraphOptions = {}): Promise<LimitedConversationGraph> {
    return this.#send({
      method: "GET",
      path: `/v1/conversations/${segment(conversationId)}/graph`,
      params: options,
    });
  }

  /** What the explorer opens a conversation on (`GET /v1/conversations/{id}/overview`): its topics with their counts
   * and the strongest links between them, for the relation `types` and `min_confidence` asked for. */
  overview(conversationId: string, options: OverviewOptions = {}): Promise<ConversationOverview> {
    return this.#send({
      method: "GET",
      path: `/v1/conversations/${segment(conversationId)}/overview`,
      params: options,
    });
  }

  /** The tenant's memory health with the last samples of each figure (`GET /v1/health/memory`): the
   * `conversation` named or the `limit` most recently updated ones, and the worker's figures. */
  memoryHealth(options: MemoryHealthOptions = {}): Promise<MemoryHealth> {
    return this.#send({ method: "GET", path: "/v1/health/memory", params: options });
  }

  /** Forget a conversation (`DELETE /v1/conversations/{id}`). */
  forget(conversationId: string, options: TenantOption = {}): Promise<DeleteResult> {
    return this.#send({ method: "DELETE", path: `/v1/conversations/${segment(conversationId)}`, params: options });
  }

  /** Delete one turn (`DELETE /v1/conversations/{id}/turns/{turn_id}`): its event is rebuilt from its other turns,
   * or deleted when it was the last; `NotFound` when the conversation has no such turn. */
  redactTurn(conversationId: string, turnId: string, options: TenantOption = {}): Promise<RedactResult> {
    return this.#send({
      method: "DELETE",
      path: `/v1/conversations/${segment(conversationId)}/turns/${segment(turnId)}`,
      params: options,
    });
  }

  /** Delete every conversation of a tenant (`DELETE /v1/tenants/{tenant}`): the client's key must be an admin key
   * (`COMPASSMEM_API_ADMIN_KEYS`), else `Forbidden`. */
  deleteTenant(tenant: string): Promise<TenantDeleteResult> {
    return this.#send({ method: "DELETE", path: `/v1/tenants/${segment(tenant)}` });
  }

  async #send<T>(call: Call): Promise<T> {
    const where = `${call.method} ${call.path}`;
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.#apiKey) {
      headers["Authorization"] = `Bearer ${this.#apiKey}`;
    }
    if (call.body !== undefined) {
      headers["Content-Type"] = "application/json";
    }
    // One signal for the whole exchange: the answer's body is read under the same deadline.
    const signal = AbortSignal.timeout(this.timeoutMs);
    let status: number;
    let requestId: string | undefined;
    let text: string;
    try {
      const response = await this.#fetch(this.baseUrl + call.path + queryString(call.params), {
        method: call.method,
        headers,
        body: call.body === undefined ? null : JSON.stringify(call.body),
        signal,
      });
      status = response.status;
      requestId = response.headers.get("x-request-id") ?? undefined;
      text = (await response.text()) || response.statusText;
    } catch (error) {
      throw new Unavailable(`${where}: no answer from the compassmem API at ${this.baseUrl} (${describe(error)})`, {
        cause: error,
      });
    }
    const body = parsed(text);
    if (status >= 200 && status < 300) {
      if (body === undefined) {
        throw new CompassmemError(`${where}: ${status} with an answer that is not JSON: ${text.slice(0, 200)}`, {
          status,
          requestId,
        });
      }
      return body as T;
    }
    throw errorOf(where, status, body ?? text, requestId);
  }
}

/** An id as one path segment: every character but the unreserved ones escaped, so '?', '#', '%', '/' stay in it. */
function segment(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function queryString(params: Params | undefined): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params ?? {})) {
    if (Array.isArray(value)) {
      for (const item of value) search.append(name, String(item)); // a list parameter: one per item
    } else if (value !== undefined && value !== null) {
      search.set(name, value instanceof Date ? value.toISOString() : String(value));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A fetch failure in one line: its kind, and the cause undici keeps apart ("ECONNREFUSED ..."). */
function describe(error: unknown): string {
  if (!(error instanceof Error)) {
    return String(error);
  }
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
  return `${error.name}: ${error.message}${cause}`;
}
