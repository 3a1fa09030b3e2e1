/**
 * The errors of the client, one class per kind of refusal, as the Python client's (`compassmem.core.errors`):
 * `BadRequest` (400/413/422, with the server's per-field `errors`), `Unauthorized` (401), `Forbidden` (403),
 * `NotFound` (404), `Unavailable` (503, and a server that cannot be reached or does not answer in time),
 * `ServerError` (another 5xx); every one a `CompassmemError`.
 */

import type { FieldError } from "./types.js";

/** What a failed request left to know. */
export interface ErrorContext {
  /** The HTTP status, when a server answered. */
  status?: number | undefined;
  /** The server's `detail`: its message, or the field errors as "field: message; ...". */
  detail?: string | undefined;
  /** The server's `X-Request-ID` for the request: the id its log lines carry. */
  requestId?: string | undefined;
  cause?: unknown;
}

/** Anything compassmem refuses or fails to do. */
export class CompassmemError extends Error {
  readonly status: number | undefined;
  readonly detail: string | undefined;
  readonly requestId: string | undefined;

  constructor(message: string, context: ErrorContext = {}) {
    super(message, context.cause === undefined ? undefined : { cause: context.cause });
    this.name = new.target.name;
    this.status = context.status;
    this.detail = context.detail;
    this.requestId = context.requestId;
  }
}

/** A field breaks a rule (HTTP 400/413/422): `errors` names each field and the rule it broke, as the server wrote
 * them (empty when the server named no field, e.g. a body over the size limit). */
export class BadRequest extends CompassmemError {
  readonly errors: FieldError[];

  constructor(message: string, context: ErrorContext = {}, errors: FieldError[] = []) {
    super(message, context);
    this.errors = errors;
  }
}

/** The tenant needs an API key and none was sent (HTTP 401). */
export class Unauthorized extends CompassmemError {}

/** The API key is not valid for the tenant, or is not an admin key (HTTP 403). */
export class Forbidden extends CompassmemError {}

/** No memory for that tenant and conversation, or no such event or turn (HTTP 404). */
export class NotFound extends CompassmemError {}

/** Try again later: a store or topic did not answer, a query ran past its deadline (HTTP 503), or the server could
 * not be reached or did not answer within the timeout (no `status`). */
export class Unavailable extends CompassmemError {}

/** The server failed (another 5xx); its log has the traceback, under `requestId`. */
export class ServerError extends CompassmemError {}

const BY_STATUS: Record<number, typeof CompassmemError> = {
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  503: Unavailable,
};

/** The error an answer that is not a success stands for, with the server's message. `where`: "METHOD /path". */
export function errorOf(where: string, status: number, body: unknown, requestId: string | undefined): CompassmemError {
  const context = { status, requestId };
  const fields = fieldErrors(body);
  if ((status === 400 || status === 413 || status === 422) && fields !== undefined) {
    const detail = fields.map((error) => `${error.field}: ${error.message}`).join("; ");
    return new BadRequest(`${where}: ${status} ${detail}`, { ...context, detail }, fields);
  }
  const detail = detailOf(body);
  const message = `${where}: ${status} ${detail}`;
  if (status === 400 || status === 413 || status === 422) {
    return new BadRequest(message, { ...context, detail });
  }
  const Kind = BY_STATUS[status] ?? (status >= 500 ? ServerError : CompassmemError);
  return new Kind(message, { ...context, detail });
}

function fieldErrors(body: unknown): FieldError[] | undefined {
  const detail = isObject(body) ? body["detail"] : undefined;
  if (!Array.isArray(detail)) {
    return undefined;
  }
  const valid = detail.every(
    (item) => isObject(item) && typeof item["field"] === "string" && typeof item["message"] === "string",
  );
  return valid ? (detail as FieldError[]) : undefined;
}

function detailOf(body: unknown): string {
  if (isObject(body) && typeof body["detail"] === "string") {
    return body["detail"];
  }
  // Not the API's error record (a proxy's page, say): the start of what came back.
  return typeof body === "string" ? body.slice(0, 500) : JSON.stringify(body).slice(0, 500);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
