export { Client, DEFAULT_TIMEOUT_MS } from "./client.js";
export type { ClientOptions } from "./client.js";
export {
  BadRequest,
  CompassmemError,
  Forbidden,
  NotFound,
  ServerError,
  Unauthorized,
  Unavailable,
} from "./errors.js";
export type { ErrorContext } from "./errors.js";
export type * from "./types.js";
export type { components, operations, paths } from "./openapi.js";
