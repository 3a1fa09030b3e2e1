/**
 * `Client` against a real `compassmem dev` (see `served.ts`): every verb, pagination over several pages, the typed
 * errors with the server's detail, the API key header, and forget and redact as later calls see them.
 *
 * The served memory holds the sample conversation "priya-tom" (tenant "default") and "acme-1" (the keyed tenant);
 * the tests that write use a tenant of their own, deleted at the end, so the Python tests sharing the server see
 * nothing of them.
 */

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import {
  BadRequest,
  Client,
  CompassmemError,
  Forbidden,
  NotFound,
  Unauthorized,
  Unavailable,
  type TurnInput,
} from "../src/index.js";
import { served, waitUntil } from "./served.js";

const QUESTION = "Why was the Atlas launch moved, and when did it finally launch?";

describe("reading the sample conversation", () => {
  const client = new Client(served.url);

  it("answers a question with its evidence, in every scope", async () => {
    const response = await client.query(QUESTION, { conversation_id: "priya-tom", budget_turns: 8 });
    assert.ok(response.turn_ids.includes("S2:2") && response.turn_ids.includes("S3:1"), String(response.turn_ids));
    const first = response.evidence[0];
    assert.ok(first !== undefined && first.turns.length > 0 && first.conversation_id === "priya-tom");
    // The same request as one record, and the other scopes over the tenant's one conversation.
    const asRecord = await client.query({ question: QUESTION, conversation_id: "priya-tom", budget_turns: 8 });
    assert.deepEqual(asRecord.turn_ids, response.turn_ids);
    for (const scope of [{ conversation_ids: ["priya-tom"] }, { all_conversations: true }]) {
      const scoped = await client.query(QUESTION, { ...scope, budget_turns: 8, max_hops: 3 });
      assert.ok(scoped.turn_ids.includes("S2:2"), JSON.stringify(scope));
    }
  });

  it("keeps only the turns a time range and a metadata filter admit", async () => {
    // Sessions 1-2 are of March 2024, session 3 of 22 April: up to March, the launch turn of April is left out.
    const march = await client.query(QUESTION, { conversation_id: "priya-tom", budget_turns: 50,
                                                 time_to: "2024-03-31T23:59:59Z" });
    assert.ok(march.turn_ids.includes("S2:2") && !march.turn_ids.includes("S3:1"), String(march.turn_ids));
    assert.ok(march.evidence.every((item) => item.turns.every((turn) => turn.timestamp < "2024-04")));
    // The sample's turns carry no metadata: no turn matches, and that is an empty answer, not a NotFound.
    const tagged = await client.query(QUESTION, { conversation_id: "priya-tom", metadata: { channel: "chat" } });
    assert.deepEqual(tagged.turn_ids, []);
  });

  it("gets an event with its source turns", async () => {
    const response = await client.query(QUESTION, { conversation_id: "priya-tom" });
    const evidence = response.evidence[0]!;
    const event = await client.event(evidence.event_id);
    assert.equal(event.event_id, evidence.event_id);
    assert.equal(event.conversation_id, "priya-tom");
    const observed = new Set(event.observations.map((o) => o.turn_id));
    assert.ok(evidence.turns.every((turn) => observed.has(turn.turn_id)));
  });

  it("pages through a conversation's events with cursors", async () => {
    const first = await client.events("priya-tom", { limit: 2 });
    assert.equal(first.events.length, 2);
    assert.ok(first.next_cursor);
    const second = await client.events("priya-tom", { limit: 2, cursor: first.next_cursor });
    const firstIds = new Set(first.events.map((e) => e.id));
    assert.ok(second.events.length > 0 && second.events.every((e) => !firstIds.has(e.id)));
    const all: string[] = [];
    for await (const event of client.allEvents("priya-tom", { limit: 2 })) {
      all.push(event.id);
    }
    assert.ok(all.length > 2);
    assert.equal(new Set(all).size, all.length);
    const whole = await client.events("priya-tom", { limit: 200 });
    assert.deepEqual(all, whole.events.map((e) => e.id));
  });

  it("draws the graph, limited by max_nodes and since", async () => {
    const graph = await client.graph("priya-tom", { max_nodes: 2 });
    assert.equal(graph.counts.events, 2);
    assert.ok(graph.limits.events_total >= 2 && graph.limits.max_nodes === 2);
    const whole = await client.graph("priya-tom");
    assert.ok(whole.counts.events === whole.limits.events_total && whole.edges.length > 0);
    const future = await client.graph("priya-tom", { since: new Date("2100-01-01T00:00:00Z") });
    assert.equal(future.counts.events, 0);
    assert.equal(future.limits.since?.slice(0, 10), "2100-01-01");
  });

  it("opens on the overview and focuses on some events, a list parameter repeated", async () => {
    const overview = await client.overview("priya-tom", { types: ["temporal", "follow_up"], min_confidence: 0.5 });
    assert.deepEqual(overview.filters.types, ["follow_up", "temporal"]);
    assert.equal(overview.counts.events, overview.topics.reduce((sum, topic) => sum + topic.events, 0));
    const whole = await client.graph("priya-tom");
    const ids = whole.nodes.filter((node) => node.kind === "event").slice(0, 2).map((node) => node.id);
    const focused = await client.graph("priya-tom", { event: ids });
    for (const id of ids) assert.ok(focused.nodes.some((node) => node.id === id));
    const touching = whole.edges.filter((edge) => ids.includes(edge.source) || ids.includes(edge.target));
    assert.equal(focused.edges.length, touching.length);
  });

  it("reports memory health", async () => {
    const health = await client.memoryHealth({ conversation: "priya-tom" });
    const [conversation] = health.conversations;
    assert.equal(conversation?.conversation_id, "priya-tom");
    assert.ok(conversation !== undefined && health.totals.events >= conversation.events);
    assert.deepEqual(Object.keys(conversation.trend.series).sort(),
      ["average_degree", "confidence_drift", "duplicate_rate", "events", "relations"]);
  });
});

describe("typed errors", () => {
  const client = new Client(served.url);

  it("a 422 names the field and the rule", async () => {
    const error = await rejection(client.query("   ", { conversation_id: "priya-tom" }), BadRequest);
    assert.equal(error.status, 422);
    assert.deepEqual(error.errors, [{ field: "question", message: "must not be blank" }]);
    assert.equal(error.detail, "question: must not be blank");
    assert.match(error.message, /^POST \/v1\/query: 422 question: must not be blank$/);
    assert.match(error.requestId ?? "", /^[0-9a-f]{32}$/);
    assert.ok(error instanceof CompassmemError && error instanceof Error && error.name === "BadRequest");

    const turn = { conversation_id: "c", turn_id: "1", speaker: "A", text: "hi", timestamp: 5 };
    const badTurn = await rejection(client.add(turn as unknown as TurnInput), BadRequest);
    assert.deepEqual(badTurn.errors.map((e) => e.field), ["timestamp"]);
    const inList = await rejection(client.add([turn as unknown as TurnInput]), BadRequest);
    assert.deepEqual(inList.errors.map((e) => e.field), ["[0].timestamp"]);
    const twoScopes = await rejection(client.query("Who?", { conversation_id: "priya-tom", subject_id: "x" }), BadRequest);
    assert.match(twoScopes.message, /give exactly one scope/);
    const badLimit = await rejection(client.conversations({ limit: 0 }), BadRequest);
    assert.deepEqual(badLimit.errors.map((e) => e.field), ["limit"]);
    const naive = await rejection(client.query("Who?", { conversation_id: "priya-tom",
                                                         time_from: "2024-03-01T00:00:00" }), BadRequest);
    assert.deepEqual(naive.errors.map((e) => e.field), ["time_from"]);
  });

  it("a body over the size limit is a BadRequest with status 413", async () => {
    const huge = { conversation_id: "c", turn_id: "1", speaker: "A", text: "x".repeat(served.maxBodyBytes),
                   timestamp: "2024-05-01T10:00:00+00:00" };
    const error = await rejection(client.add(huge), BadRequest);
    assert.equal(error.status, 413);
    assert.deepEqual(error.errors, []);
    assert.match(error.detail ?? "", new RegExp(`larger than the limit of ${served.maxBodyBytes} bytes`));
  });

  it("no memory is NotFound with the server's message; ids travel as one escaped segment", async () => {
    const missing = await rejection(client.query("Who?", { conversation_id: "nobody" }), NotFound);
    assert.equal(missing.status, 404);
    assert.match(missing.detail ?? "", /no memory for conversation 'nobody'/);
    await rejection(client.graph("nobody"), NotFound);
    await rejection(client.events("nobody"), NotFound);
    // The whole id reaches the server ('?' and '#' do not cut the path), which refuses it by the id rule.
    const odd = await rejection(client.graph("what?#now %2F"), BadRequest);
    assert.match(JSON.stringify(odd.errors), /'\?' U\+003F \(QUESTION MARK\) at position 4/);
    const plain = await rejection(client.graph("no+such:id@x"), NotFound);
    assert.match(plain.detail ?? "", /no\+such:id@x/);
  });

  it("an unreachable server and a timeout are Unavailable", async () => {
    const nowhere = new Client("http://127.0.0.1:9", { timeoutMs: 5000 });
    const refused = await rejection(nowhere.conversations(), Unavailable);
    assert.equal(refused.status, undefined);
    assert.match(refused.message, /no answer from the compassmem API at http:\/\/127\.0\.0\.1:9/);

    // A server that takes requests and never answers.
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const port = (silent.address() as AddressInfo).port;
      const slow = new Client(`http://127.0.0.1:${port}`, { timeoutMs: 300 });
      const started = Date.now();
      const timedOut = await rejection(slow.query("Who?", { conversation_id: "c" }), Unavailable);
      assert.match(timedOut.message, /TimeoutError/);
      assert.ok(Date.now() - started < 5000);
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });
});

describe("API keys", () => {
  it("go as a bearer token; none is Unauthorized, a wrong one Forbidden", async () => {
    const anonymous = new Client(served.url);
    const unauthorized = await rejection(
      anonymous.query("What drops?", { conversation_id: "acme-1", tenant: served.keyTenant }),
      Unauthorized,
    );
    assert.equal(unauthorized.status, 401);
    const wrong = new Client(served.url, { apiKey: "not-the-key-of-anyone" });
    const forbidden = await rejection(wrong.conversations({ tenant: served.keyTenant }), Forbidden);
    assert.equal(forbidden.status, 403);
    const keyed = new Client(served.url, { apiKey: served.key });
    const response = await keyed.query("What drops?", { conversation_id: "acme-1", tenant: served.keyTenant });
    assert.deepEqual(response.turn_ids, ["1"]);
    const page = await keyed.conversations({ tenant: served.keyTenant });
    assert.deepEqual(page.conversations.map((c) => c.conversation_id), ["acme-1"]);
  });
});

describe("writing, forgetting and redacting in a tenant of its own", () => {
  const tenant = `ts-client-${process.pid}`;
  const client = new Client(served.url, { timeoutMs: 60_000 });
  const at = (minute: number) => `2024-05-01T10:${String(minute).padStart(2, "0")}:00+00:00`;
  const turn = (conversation_id: string, turn_id: string, speaker: string, text: string, minute: number,
                subject_id?: string): TurnInput => ({
    tenant, conversation_id, turn_id, speaker, text, timestamp: at(minute), ...(subject_id ? { subject_id } : {}),
  });
  const conversations = {
    "ts-lisbon": [
      turn("ts-lisbon", "1", "Ann", "My sister Jo moves to Lisbon in June for her new job.", 0, "cust-ann"),
      turn("ts-lisbon", "2", "Ben", "Jo also adopted a grey cat called Pixel last week.", 1, "cust-ann"),
      turn("ts-lisbon", "3", "Ann", "Pixel will fly to Lisbon with Jo in June.", 2, "cust-ann"),
    ],
    "ts-garden": [
      turn("ts-garden", "1", "Ann", "The tomatoes in the greenhouse got blight in August.", 10, "cust-ann"),
      turn("ts-garden", "2", "Ben", "We sprayed copper on the tomatoes and the blight stopped.", 11, "cust-ann"),
    ],
    "ts-bikes": [
      turn("ts-bikes", "1", "Cy", "My road bike got a new chain and cassette in spring.", 20),
      turn("ts-bikes", "2", "Dee", "The chain on the road bike snapped again on the hill.", 21),
    ],
  };
  const turnCount = Object.values(conversations).reduce((sum, turns) => sum + turns.length, 0);

  before(async () => {
    const [first, ...rest] = Object.values(conversations).flat();
    assert.equal((await client.add(first!)).accepted, 1);
    assert.equal((await client.add(rest)).accepted, turnCount - 1);
    await waitUntil(
      async () => {
        // Every turn in a stored (closed) event, and each conversation answers.
        const page = await client.conversations({ tenant });
        const stored = page.conversations.filter((c) => c.provisional_events === 0);
        return stored.reduce((sum, c) => sum + c.turns, 0) === turnCount && stored.length === 3;
      },
      90_000,
      "the worker to store the added turns",
    );
  });

  after(async () => {
    // Whatever a failed test left: the tenant goes (the admin key).
    await new Client(served.url, { apiKey: served.adminKey }).deleteTenant(tenant);
  });

  it("pages through the tenant's conversations with cursors", async () => {
    const ids: string[] = [];
    let cursor: string | null | undefined;
    let pages = 0;
    do {
      const page = await client.conversations({ tenant, limit: 1, order: "id", cursor });
      assert.equal(page.tenant, tenant);
      assert.equal(page.total, 3);
      assert.ok(page.conversations.length <= 1);
      ids.push(...page.conversations.map((c) => c.conversation_id));
      cursor = page.next_cursor;
      pages += 1;
    } while (cursor);
    assert.ok(pages >= 3);
    assert.deepEqual(ids, ["ts-bikes", "ts-garden", "ts-lisbon"]);
    const iterated: string[] = [];
    for await (const summary of client.allConversations({ tenant, limit: 2, order: "id" })) {
      iterated.push(summary.conversation_id);
    }
    assert.deepEqual(iterated, ids);
    const searched = await client.conversations({ tenant, q: "cassette" });
    assert.deepEqual(searched.conversations.map((c) => c.conversation_id), ["ts-bikes"]);
    const lisbon = (await client.conversations({ tenant, q: "ts-lisbon" })).conversations[0]!;
    assert.equal(lisbon.turns, 3);
    assert.deepEqual(lisbon.subject_ids, ["cust-ann"]);
  });

  it("asks across a subject's conversations and a list of conversations", async () => {
    const bySubject = await client.query("What happened to the tomatoes?", { tenant, subject_id: "cust-ann" });
    assert.ok(bySubject.evidence.length > 0);
    assert.ok(bySubject.evidence.every((item) => item.conversation_id !== "ts-bikes"));
    assert.equal(bySubject.evidence[0]!.conversation_id, "ts-garden");
    const listed = await client.query("Which chain snapped?", {
      tenant,
      conversation_ids: ["ts-bikes", "ts-lisbon"],
    });
    assert.ok(listed.turn_refs?.some((ref) => ref.conversation_id === "ts-bikes" && ref.turn_id === "2"));
    const everywhere = await client.query("Where does Jo move?", { tenant, all_conversations: true });
    assert.equal(everywhere.evidence[0]!.conversation_id, "ts-lisbon");
  });

  it("a redacted turn is gone from later answers and events", async () => {
    const before = await client.query("What is the cat called?", { tenant, conversation_id: "ts-lisbon" });
    assert.ok(before.turn_ids.includes("2"), String(before.turn_ids));
    const result = await client.redactTurn("ts-lisbon", "2", { tenant });
    assert.equal(result.tenant, tenant);
    assert.equal(result.turn_id, "2");
    const afterwards = await client.query("What is the cat called?", { tenant, conversation_id: "ts-lisbon" });
    assert.ok(!afterwards.turn_ids.includes("2"), String(afterwards.turn_ids));
    const texts = afterwards.evidence.flatMap((item) => item.turns.map((t) => t.text));
    assert.ok(texts.every((text) => !text.includes("grey cat")), String(texts));
    if (result.event_deleted) {
      await rejection(client.event(result.event_id, { tenant }), NotFound);
    } else {
      const event = await client.event(result.event_id, { tenant });
      assert.ok(event.observations.every((o) => o.turn_id !== "2"));
    }
    const page = await client.conversations({ tenant, q: "ts-lisbon" });
    assert.equal(page.conversations[0]!.turns, 2);
    // Once more: the conversation no longer has that turn.
    await rejection(client.redactTurn("ts-lisbon", "2", { tenant }), NotFound);
  });

  it("a forgotten conversation answers no more and leaves the listing", async () => {
    const result = await client.forget("ts-garden", { tenant });
    assert.equal(result.conversation_id, "ts-garden");
    assert.ok(result.events_deleted >= 1);
    await rejection(client.query("What happened to the tomatoes?", { tenant, conversation_id: "ts-garden" }),
                    NotFound);
    await rejection(client.events("ts-garden", { tenant }), NotFound);
    const ids: string[] = [];
    for await (const summary of client.allConversations({ tenant, order: "id" })) {
      ids.push(summary.conversation_id);
    }
    assert.deepEqual(ids, ["ts-bikes", "ts-lisbon"]);
    assert.equal((await client.forget("never-there", { tenant })).events_deleted, 0);
  });

  it("deleting the tenant takes an admin key", async () => {
    await rejection(new Client(served.url).deleteTenant(tenant), Unauthorized);
    const tenantKey = new Client(served.url, { apiKey: served.key });
    assert.equal((await rejection(tenantKey.deleteTenant(tenant), Forbidden)).status, 403);
    const admin = new Client(served.url, { apiKey: served.adminKey });
    const result = await admin.deleteTenant(tenant);
    assert.equal(result.tenant, tenant);
    assert.ok(result.events_deleted >= 2);
    const page = await client.conversations({ tenant });
    assert.deepEqual(page.conversations, []);
    await rejection(client.query("Where does Jo move?", { tenant, conversation_id: "ts-lisbon" }), NotFound);
  });
});

/** The error `promise` rejects with, checked to be a `kind`. */
async function rejection<E extends CompassmemError>(
  promise: Promise<unknown>,
  kind: abstract new (...args: never[]) => E,
): Promise<E> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof kind, `expected a ${kind.name}, got ${String(error)}`);
    return error;
  }
  assert.fail(`expected a ${kind.name}, the call succeeded`);
}
