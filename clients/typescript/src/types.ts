/**
 * The API's records under readable names, all taken from the generated OpenAPI types (`openapi.ts`), so a change of
 * the server's schema shows up here as a compile error or a new field, never as a silent drift.
 *
 * Records keep the API's own snake_case names, in requests and answers alike: a 422 names the field as you wrote it.
 */

import type { components, paths } from "./openapi.js";

type Schemas = components["schemas"];
type QueryOf<P extends keyof paths, M extends "get" | "delete"> = NonNullable<
  NonNullable<paths[P][M]>["parameters"]["query"]
>;

export type Turn = Schemas["Turn"];
export type ChatMessage = Schemas["ChatMessage"];
export type Attachment = Schemas["Attachment"];
export type QueryRequest = Schemas["QueryRequest"];
export type QueryResponse = Schemas["QueryResponse"];
export type EvidenceItem = Schemas["EvidenceItem"];
export type TurnOut = Schemas["TurnOut"];
export type TurnRef = Schemas["TurnRef"];
export type PathStep = Schemas["PathStep"];
export type TimeAnchor = Schemas["TimeAnchor"];
export type EventOut = Schemas["EventOut"];
export type Observation = Schemas["Observation"];
export type ConversationPage = Schemas["ConversationPage"];
export type ConversationSummary = Schemas["ConversationSummary"];
export type EventPage = Schemas["EventPage"];
export type GraphNode = Schemas["GraphNode"];
export type GraphEdge = Schemas["GraphEdge"];
export type LimitedConversationGraph = Schemas["LimitedConversationGraph"];
export type DeleteResult = Schemas["DeleteResult"];
export type RedactResult = Schemas["RedactResult"];
export type TenantDeleteResult = Schemas["TenantDeleteResult"];
export type TurnsAccepted = Schemas["TurnsAccepted"];
export type FieldError = Schemas["FieldError"];
export type ConversationOverview = Schemas["ConversationOverview"];
export type TopicSummary = Schemas["TopicSummary"];
export type TopicLink = Schemas["TopicLink"];
export type MemoryHealth = Schemas["MemoryHealth"];
export type ConversationHealthReport = Schemas["ConversationHealthReport"];
export type WorkerHealth = Schemas["WorkerHealth"];
export type HealthTrend = Schemas["HealthTrend"];

/** A turn to add: the server fills in the fields it has defaults for (`tenant`: "default"). */
export type TurnInput = Omit<Turn, "tenant"> & { tenant?: Turn["tenant"] };
/** A chat message to add (`role`, `content`, `conversation_id`): the server fills in its speaker, id and time
 * (docs/getting-started.md, Input formats) and the tenant. */
export type ChatMessageInput = Omit<ChatMessage, "tenant"> & { tenant?: ChatMessage["tenant"] };

/** The fields of a query besides the question: one scope (`conversation_id`, `conversation_ids`, `subject_id` or
 * `all_conversations: true`), the tenant, `budget_turns`, `max_hops`, the filters `time_from` and `time_to` (ISO
 * 8601 strings with a UTC offset) and `metadata`, and `min_relevance` (0-1, default 0: drops the returned turns whose
 * `relevance`, the calibrated probability that a turn is evidence, is below it; the response's `answerable` and
 * `answerable_probability` say whether memory likely holds an answer at all); the server's defaults for the rest. */
export type QueryOptions = Partial<Omit<QueryRequest, "question">>;
/** A whole query request, the question included. */
export type QueryInput = QueryOptions & Pick<QueryRequest, "question">;

/** `GET /v1/conversations`: `tenant`, `q` (search), `limit`, `cursor` (a page's `next_cursor`), `order`. */
export type ConversationsOptions = QueryOf<"/v1/conversations", "get">;
/** `GET /v1/conversations/{id}/events`: `tenant`, `limit`, `cursor`. */
export type EventsOptions = QueryOf<"/v1/conversations/{conversation_id}/events", "get">;
/** `GET /v1/conversations/{id}/graph`: `tenant`, `max_nodes`, `since` (a `Date`, or ISO 8601 with an offset); focused:
 * `topic` (topic ids), `unclustered`, `event` (event ids). */
export type GraphOptions = Omit<QueryOf<"/v1/conversations/{conversation_id}/graph", "get">, "since"> & {
  since?: Date | string | null;
};
/** `GET /v1/conversations/{id}/overview`: `tenant`, `types` (relation types), `min_confidence`, `links`. */
export type OverviewOptions = QueryOf<"/v1/conversations/{conversation_id}/overview", "get">;
/** `GET /v1/health/memory`: `tenant`, `conversation`, `limit`. */
export type MemoryHealthOptions = QueryOf<"/v1/health/memory", "get">;
/** The tenant of a request on one conversation, event or turn ("default" when not given). */
export type TenantOption = QueryOf<"/v1/events/{event_id}", "get">;
