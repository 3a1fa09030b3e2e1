"""The streaming worker's guarantees, against the real Tansu broker and real stores (no mocks).

The reference memory of every test is what the in-process pipeline (``compassmem ingest``) builds from the same
turns: an uninterrupted, perfectly ordered run. Workers run as ``compassmem worker`` processes where a test kills
or restarts them, and as an in-process thread where the test reads the embedded vector store while it runs.
Fixtures and helpers: the "streaming worker" section of conftest.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.partitioner.default import murmur2
from prometheus_client import generate_latest

from compassmem.core.contracts.commands import ForgetCommand
from compassmem.core.contracts.search import SearchScope
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.sinks.vector_store import HitSearch, TurnHit
from compassmem.streams.runner import InProcessWorker
from compassmem.streams.topics import MEMORY_TABLE, TOMBSTONE_TABLE, changelog_topic

from conftest import (
    StreamRun,
    WorkerProcess,
    describe_difference,
    expected_snapshot,
    graph_snapshot,
    interleave,
    reference_snapshots,
    stores_snapshot,
    stream_conversation,
    wait_until,
)
from prometheus_text import parse_samples, total
from prometheus_text import value as metric_value

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4


def spread_ids(prefix: str, count: int, tenant: str = "default") -> list[str]:
    """Conversation ids whose keys land on every partition (kafka-python's murmur2 partitioner), so that each
    worker of a group gets some conversations whatever partitions it is assigned."""
    chosen: list[str] = []
    covered: set[int] = set()
    candidate = 0
    while len(chosen) < count:
        conversation_id = f"{prefix}{candidate}"
        partition = (murmur2(f"{tenant}/{conversation_id}".encode()) & 0x7FFFFFFF) % PARTITIONS
        if partition not in covered or len(covered) == PARTITIONS:
            chosen.append(conversation_id)
            covered.add(partition)
        candidate += 1
    return chosen


def graph_matches(graph: FalkorDBGraphStore, reference: dict[str, dict]) -> bool:
    for key, expected in reference.items():
        actual = graph_snapshot(graph, key)
        if actual["events"] != sorted(expected["events"]) or actual["relations"] != expected["relations"]:
            return False
    return True


def graph_difference(graph: FalkorDBGraphStore, reference: dict[str, dict]) -> str:
    lines = []
    for key, expected in reference.items():
        actual = graph_snapshot(graph, key)
        want = {"events": sorted(expected["events"]), "relations": expected["relations"]}
        if actual != want:
            lines.append(f"{key}: {describe_difference(want, actual)}")
    return "\n".join(lines)


def assert_stores_equal(vectors, graph, reference: dict[str, dict]) -> None:  # noqa: ANN001
    for key, expected in reference.items():
        actual = stores_snapshot(vectors, graph, key)
        assert actual == expected_snapshot(expected), f"{key}:\n{describe_difference(expected_snapshot(expected), actual)}"


def produce_in_background(run: StreamRun, turns: list, rate: float | None) -> threading.Thread:
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with run.producer() as producer:
                producer.produce(turns, rate=rate)
        except BaseException as error:  # noqa: BLE001 - reported by join_producer
            errors.append(error)

    thread = threading.Thread(target=produce, name="test-producer", daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def join_producer(thread: threading.Thread) -> None:
    thread.join(60)
    assert not thread.is_alive(), "the producer did not finish within 60 s"
    assert not thread.errors, f"producing failed: {thread.errors}"  # type: ignore[attr-defined]


def true_end_offsets(run: StreamRun, topic: str) -> dict[int, int]:
    """End offsets by reading the topic: Tansu's ListOffsets answers the last *batch*'s base offset + 1."""
    ends = {partition: 0 for partition in range(PARTITIONS)}
    for record in run.read_topic(topic, idle_s=0.7):
        ends[record.partition] = max(ends[record.partition], record.offset + 1)
    return ends


def committed_offsets(run: StreamRun, group: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=run.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) or 0 for p in range(PARTITIONS)}
    finally:
        consumer.close()


@contextlib.contextmanager
def replayed(run: StreamRun, label: str) -> Iterator[tuple[Stores, WorkerProcess]]:
    """A replay: a new consumer group with empty tables and empty stores (its own FalkorDB) reads the turns topic
    from the start to its end; yields what it built (the worker stopped) and the worker, for its log."""
    settings = run.settings()
    group = f"{run.name}-{label}"
    with EmbeddedFalkorDB(run.root / f"falkordb-{label}") as fresh_graph:
        replay_dir = run.root / f"{label}-data"
        replay = run.start_worker(label, replay_dir, app_id=group, COMPASSMEM_FALKORDB_URL=fresh_graph.url)
        replay.wait_assigned()
        wait_until(lambda: committed_offsets(run, group, settings.turns_topic)
                   == true_end_offsets(run, settings.turns_topic), 120, "the replay to reach the end of the log",
                   0.5, replay.stacks)
        replay.stop()
        with open_stores(run.settings(replay_dir, falkordb_url=fresh_graph.url)) as stores:
            yield stores, replay


# -- at-least-once delivery, idempotent writes -------------------------------------------------------------------


def test_kill9_mid_stream_then_restart_builds_the_same_memory(stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    turns = interleave([stream_conversation(f"kill-{i}", i) for i in range(5)])
    reference = reference_snapshots(turns, embedder)
    data_dir = stream_run.root / "worker-data"
    # This worker never commits offsets: after the kill every record comes again, including those whose state is
    # already in the table, so the restart must skip exactly what was applied.
    first = stream_run.start_worker("kill-first", data_dir, COMPASSMEM_KAFKA_COMMIT_INTERVAL_S="3600")
    first.wait_assigned()
    producer = produce_in_background(stream_run, turns, rate=40)
    wait_until(lambda: first.batch_totals().get("applied", 0) >= 40, 60, "40 turns applied before the kill",
               0.05, first.tail)
    first.kill9()
    applied_before_kill = first.batch_totals().get("applied", 0)
    assert applied_before_kill < len(turns), "the worker finished before the kill: not a mid-stream crash"
    join_producer(producer)

    second = stream_run.start_worker("kill-second", data_dir)
    second.wait_assigned()
    graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
    try:
        wait_until(lambda: graph_matches(graph, reference), 120, "the restarted worker's graph to match the reference",
                   0.5, lambda: graph_difference(graph, reference) + "\n" + second.tail())
    finally:
        graph.close()
    second.stop()
    totals = second.batch_totals()
    assert totals.get("replayed_skipped", 0) > 0, f"no redelivered record was skipped: {totals}\n{second.tail()}"
    assert totals.get("dead_letters", 0) == 0, second.tail()
    with stream_run.open_stores(data_dir) as stores:
        assert_stores_equal(stores.vectors, stores.graph, reference)

    # A worker started on the finished memory reports its health from its table alone, before any new turn.
    third = stream_run.start_worker("kill-third", data_dir)
    third.wait_assigned()
    events = sum(len(snapshot["events"]) for snapshot in reference.values())  # type: ignore[arg-type]

    def covered() -> tuple[float, float]:
        samples = parse_samples(httpx.get(third.metrics_url(), timeout=10).text)
        return (metric_value(samples, "compassmem_memory_conversations"),
                metric_value(samples, "compassmem_memory_events"))

    wait_until(lambda: covered() == (len(reference), events), 30, "the health gauges to cover the table", 0.3,
               lambda: f"{covered()} != {(len(reference), events)}")
    third.stop()


# -- malformed messages ------------------------------------------------------------------------------------------


def _turn(**overrides: object) -> dict:
    turn = {"tenant": "default", "conversation_id": "bad", "turn_id": "X:1", "speaker": "Ann",
            "text": "A perfectly fine sentence.", "timestamp": "2024-03-04T09:00:00+00:00", "session_id": "1"}
    turn.update(overrides)
    return {k: v for k, v in turn.items() if v is not None}


MALFORMED = [
    # label, key, value, headers, stage, words the reason must contain
    ("bad JSON", b"default/bad", b'{"tenant": "default", "text": ', [], "decode", ["not JSON"]),
    ("not UTF-8", b"default/bad", b"\xff\xfe\x00garbage", [], "decode", ["UTF-8"]),
    ("not an object", b"default/bad", b"[1, 2, 3]", [], "decode", ["not an object"]),
    ("missing field", b"default/bad", json.dumps(_turn(speaker=None)).encode(), [], "validate", ["speaker", "required"]),
    ("wrong type", b"default/bad", json.dumps(_turn(speaker=42)).encode(), [], "validate", ["speaker", "string"]),
    ("text over 16 KiB", b"default/bad", json.dumps(_turn(text="x" * 17000)).encode(), [], "validate",
     ["text", "16 KiB"]),
    ("bad tenant", b"Bad Tenant!/bad", json.dumps(_turn(tenant="Bad Tenant!")).encode(), [], "validate",
     ["tenant", "pattern"]),
    ("id with a slash", b"default/a/b", json.dumps(_turn(conversation_id="a/b")).encode(), [], "validate",
     ["conversation_id", "/"]),
    # One id, one conversation: ids a store would trim or a reader could not tell from "bad" are refused.
    ("id with a space at its end", b"default/bad ", json.dumps(_turn(conversation_id="bad ")).encode(), [],
     "validate", ["conversation_id", "U+0020"]),
    ("id with a no-break space", b"default/bad", json.dumps(_turn(conversation_id="bad\u00a0")).encode(), [],
     "validate", ["conversation_id", "U+0020"]),
    ("id with a Hangul filler", b"default/bad", json.dumps(_turn(conversation_id="bad\u3164")).encode(), [],
     "validate", ["conversation_id", "HANGUL", "invisible"]),
    ("id with a Cyrillic a", b"default/bad", json.dumps(_turn(conversation_id="b\u0430d")).encode(), [],
     "validate", ["conversation_id", "U+0430"]),
    ("turn id with a space", b"default/bad", json.dumps(_turn(turn_id=" X:1")).encode(), [], "validate",
     ["turn_id", "U+0020"]),
    ("naive timestamp", b"default/bad", json.dumps(_turn(timestamp="2024-03-04T09:00:00")).encode(), [], "validate",
     ["timestamp", "offset"]),
    ("unknown field", b"default/bad", json.dumps(_turn(mood="happy")).encode(), [], "validate", ["mood"]),
    ("wrong key", b"default/other", json.dumps(_turn()).encode(), [], "route", ["key", "default/bad"]),
    ("unknown control header", b"default/bad", json.dumps(_turn()).encode(), [("compassmem-control", b"reboot")],
     "decode", ["compassmem-control"]),
    # What the stores cannot hold (FalkorDB refuses U+0000) is refused at the schema: one of these used to stop
    # every partition in a crash loop.
    ("NUL in text", b"default/bad", json.dumps(_turn(text="hello\u0000world")).encode(), [], "validate", ["text"]),
    ("NUL in speaker", b"default/bad", json.dumps(_turn(speaker="Ann\u0000")).encode(), [], "validate", ["speaker"]),
    ("NUL in session id", b"default/bad", json.dumps(_turn(session_id="1\u0000")).encode(), [], "validate",
     ["session_id"]),
    ("lone surrogate in a caption", b"default/bad",
     b'{"conversation_id": "bad", "turn_id": "X:1", "speaker": "Ann", "text": "hi", '
     b'"timestamp": "2024-03-04T09:00:00+00:00", "attachments": [{"caption": "\\ud800"}]}', [], "validate",
     ["caption"]),
    ("JSON nested 100,000 deep", b"default/bad", b"[" * 100_000 + b"]" * 100_000, [], "decode", ["nested"]),
    ("integer timestamp", b"default/bad", json.dumps(_turn(timestamp=1709542800000)).encode(), [], "validate",
     ["timestamp"]),
]


def test_malformed_messages_go_to_the_dead_letter_topic_and_the_stream_goes_on(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    good = stream_conversation("good", 3)
    assert len(good) >= len(MALFORMED), "every bad record is sent between two good ones"
    reference = reference_snapshots(good, embedder)
    settings = stream_run.settings()
    raw = KafkaProducer(bootstrap_servers=stream_run.bootstrap)
    sent: dict[str, tuple[str, int, int, bytes]] = {}
    with open_stores(settings) as stores:
        worker = InProcessWorker(settings, stream_run.bootstrap, stores, embedder).start()
        try:
            wait_until(lambda: worker.streaming.assigned_partitions, 60, "the in-process worker's partitions")
            with stream_run.producer() as producer:
                for index, turn in enumerate(good):
                    producer.produce([turn])
                    if index < len(MALFORMED):  # bad records between good ones: the stream must go on
                        label, key, value, headers, *_ = MALFORMED[index]
                        meta = raw.send(settings.turns_topic, key=key, value=value, headers=headers).get(10)
                        sent[label] = (meta.topic, meta.partition, meta.offset, value)
                bad_command = b'{"command": "forget", "conversation_id": "x"}'
                meta = raw.send(settings.control_topic, key=b"default", value=bad_command).get(10)
                sent["control without tenant"] = (meta.topic, meta.partition, meta.offset, bad_command)

            def letters() -> dict[tuple[str, int, int], dict]:
                return {(v["topic"], v["partition"], v["offset"]): v
                        for v in (json.loads(r.value) for r in stream_run.read_topic(settings.dlq_topic, idle_s=0.5))}

            found = wait_until(lambda: (lambda d: d if len(d) >= len(sent) else None)(letters()), 60,
                               f"{len(sent)} dead letters", 0.5, lambda: str(sorted(letters())))
            wait_until(lambda: graph_matches(stores.graph, reference), 60, "the good conversation's memory", 0.3,
                       lambda: graph_difference(stores.graph, reference))
            time.sleep(0.5)  # the batch that matched may still be writing its provisional-event cleanup
            assert_stores_equal(stores.vectors, stores.graph, reference)
        finally:
            worker.stop()
            raw.close()
    expectations = {label: (stage, words) for label, _, _, _, stage, words in MALFORMED}
    expectations["control without tenant"] = ("control", ["tenant", "required"])
    assert len(found) == len(sent), f"expected one dead letter per bad record: {sorted(found)}"
    for label, (topic, partition, offset, value) in sent.items():
        letter = found.get((topic, partition, offset))
        assert letter is not None, f"{label}: no dead letter for {topic}/{partition}/{offset}"
        stage, words = expectations[label]
        assert letter["stage"] == stage, f"{label}: stage {letter['stage']!r}, reason {letter['reason']!r}"
        for word in words:
            assert word in letter["reason"], f"{label}: {word!r} not in reason {letter['reason']!r}"
        assert base64.b64decode(letter["original_base64"]) == value, f"{label}: original bytes changed"
        assert letter["dead_lettered_at"], label
    # The worker's metrics count the same dead letters, by stage and reason code.
    samples = parse_samples(generate_latest(worker.streaming.metrics.registry).decode())
    for (stage, reason), count in Counter((v["stage"], v["reason_code"]) for v in found.values()).items():
        assert metric_value(samples, "compassmem_dead_letters_total", stage=stage, reason=reason) == count, (stage, reason)
    assert total(samples, "compassmem_dead_letters_total") == len(found)


def test_a_turn_id_given_again_is_skipped_for_the_same_turn_and_dead_lettered_for_another(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    """One turn id, one turn of its conversation (compassmem/write/turn_ids.py), on the worker: the same turn sent
    again (in its batch, while its segment is open, after its event closed) changes nothing, and another turn under
    its id goes to the dead-letter topic with the reason; memory is what the turns without them build."""
    turns = stream_conversation("twice", 4)
    reference = reference_snapshots(turns, embedder)
    changed = turns[1].model_copy(update={"text": "Something else entirely, said under the same id."})
    settings = stream_run.settings()
    with open_stores(settings) as stores:
        worker = InProcessWorker(settings, stream_run.bootstrap, stores, embedder).start()
        try:
            wait_until(lambda: worker.streaming.assigned_partitions, 60, "the in-process worker's partitions")
            with stream_run.producer() as producer:
                producer.produce([*turns[:3], turns[0]])
                wait_until(lambda: worker.streaming.totals.get("applied_turns", 0) >= 3, 60, "the first turns")
                producer.produce([changed, *turns[3:], turns[2]])
            letters = wait_until(lambda: stream_run.read_topic(settings.dlq_topic, idle_s=0.5), 60, "a dead letter")
            wait_until(lambda: graph_matches(stores.graph, reference), 60, "the conversation's memory", 0.3,
                       lambda: graph_difference(stores.graph, reference))
            time.sleep(0.5)  # the batch that matched may still be writing its provisional-event cleanup
            assert_stores_equal(stores.vectors, stores.graph, reference)
            assert {t.turn_id: t.text for t in stores.vectors.conversation_turns("default", "twice")} == {
                t.turn_id: t.indexed_text() for t in turns}
        finally:
            worker.stop()
    [letter] = [json.loads(record.value) for record in letters]
    assert (letter["stage"], letter["reason_code"]) == ("route", "duplicate_turn")
    assert f"turn {changed.turn_id!r} of conversation 'twice':" in letter["reason"]
    assert "another turn under this id" in letter["reason"]
    assert json.loads(base64.b64decode(letter["original_base64"]))["text"] == changed.text
    assert worker.streaming.totals["replayed_skipped"] == 2


# -- ordering and scale-out --------------------------------------------------------------------------------------


def test_each_conversation_keeps_its_order_in_a_mixed_burst(stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    conversations = [stream_conversation(conversation_id, i)
                     for i, conversation_id in enumerate(spread_ids("order-", 6))]
    turns = interleave(conversations, seed=11)
    reference = reference_snapshots(turns, embedder)
    settings = stream_run.settings()
    with open_stores(settings) as stores:
        worker = InProcessWorker(settings, stream_run.bootstrap, stores, embedder).start()
        try:
            wait_until(lambda: worker.streaming.assigned_partitions, 60, "the in-process worker's partitions")
            with stream_run.producer() as producer:
                producer.produce(turns)  # as one fast burst: 4 partitions, 6 conversations mixed
            wait_until(lambda: graph_matches(stores.graph, reference), 90, "the memory of all six conversations",
                       0.3, lambda: graph_difference(stores.graph, reference))
            time.sleep(0.5)
            assert_stores_equal(stores.vectors, stores.graph, reference)
            for conversation in conversations:
                tenant, conversation_id = conversation[0].tenant, conversation[0].conversation_id
                order = {t.turn_id: i for i, t in enumerate(conversation)}
                for event in stores.vectors.conversation_events(tenant, conversation_id):
                    positions = [order[turn_id] for turn_id in event.turn_ids]
                    assert positions == sorted(positions), f"{conversation_id}: event {event.event_id} out of order"
        finally:
            worker.stop()
    assert worker.streaming.totals["dead_letters"] == 0


def test_two_workers_split_the_partitions_and_build_the_same_memory(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    turns = interleave([stream_conversation(conversation_id, i)
                        for i, conversation_id in enumerate(spread_ids("pair-", 6))], seed=5)
    reference = reference_snapshots(turns, embedder)
    dirs = [stream_run.root / "worker-a", stream_run.root / "worker-b"]
    workers = [stream_run.start_worker("pair-a", dirs[0]), stream_run.start_worker("pair-b", dirs[1])]
    for worker in workers:
        worker.wait_assigned()

    def split() -> bool:
        a, b = (set(w.assigned_partitions() or ()) for w in workers)
        return bool(a) and bool(b) and not a & b and a | b == set(range(PARTITIONS))

    wait_until(split, 60, "the two workers to split the four partitions", 0.3,
               lambda: "\n".join(w.tail(10) for w in workers))
    with stream_run.producer() as producer:
        producer.produce(turns)
    graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
    try:
        wait_until(lambda: graph_matches(graph, reference), 120, "the pair's graph to match the reference", 0.5,
                   lambda: graph_difference(graph, reference) + "\n" + "\n".join(w.tail(10) for w in workers))
    finally:
        graph.close()
    # Each `compassmem worker` serves its own /metrics: the turns it consumed, the lag of its own partitions only.
    scraped = [parse_samples(httpx.get(w.metrics_url(), timeout=10).text) for w in workers]
    # consume counts every record, the worker's own idle-close markers too; segment counts applied turns.
    assert sum(total(s, "compassmem_stage_turns_total", stage="segment") for s in scraped) == len(turns)
    assert sum(total(s, "compassmem_stage_turns_total", stage="consume") for s in scraped) >= len(turns)
    for worker in workers:
        def lag_partitions(worker: WorkerProcess = worker) -> set[int]:
            samples = parse_samples(httpx.get(worker.metrics_url(), timeout=10).text)
            return {int(dict(labels)["partition"]) for name, labels in samples
                    if name == "compassmem_consumer_lag_records"}

        wait_until(lambda: lag_partitions() == set(worker.assigned_partitions() or ()), 20,
                   f"{worker.label}'s lag series to be its own partitions", 0.3, lambda: str(lag_partitions()))
    for worker in workers:
        worker.stop()
    applied = [w.batch_totals().get("applied", 0) for w in workers]
    assert all(applied) and sum(applied) == len(turns), f"turns applied per worker: {applied}"
    # Each worker's embedded vector store holds the conversations of its partitions; together, all of them.
    merged: dict[str, dict] = {}
    for data_dir in dirs:
        with stream_run.open_stores(data_dir) as stores:
            for key in reference:
                snapshot = stores_snapshot(stores.vectors, stores.graph, key)
                if snapshot["events"]:
                    assert key not in merged, f"{key} was built by both workers"
                    merged[key] = snapshot
    for key, expected in reference.items():
        assert key in merged, f"{key}: in neither worker's vector store"
        assert merged[key] == expected_snapshot(expected), \
            f"{key}:\n{describe_difference(expected_snapshot(expected), merged[key])}"


# -- forgetting --------------------------------------------------------------------------------------------------


def test_forget_removes_memory_from_stores_and_tables_and_a_replay_does_not_bring_it_back(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    conversations = {"acme/keep": stream_conversation("keep", 1, tenant="acme"),
                     "acme/drop": stream_conversation("drop", 2, tenant="acme"),
                     "globex/all": stream_conversation("all", 4, tenant="globex")}
    turns = interleave(list(conversations.values()), seed=3)
    reference = reference_snapshots(turns, embedder)
    forgotten = ["acme/drop", "globex/all"]
    kept = {"acme/keep": reference["acme/keep"]}
    settings = stream_run.settings()
    data_dir = stream_run.root / "worker-data"
    # Never committing, and killed after the forget: the restart below then replays the whole turns topic against
    # the surviving tables, which is also what a crash between a forget and its commit leads to.
    worker = stream_run.start_worker("forget", data_dir, COMPASSMEM_KAFKA_COMMIT_INTERVAL_S="3600")
    worker.wait_assigned()
    with stream_run.producer() as producer:
        producer.produce(turns)
        graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
        try:
            wait_until(lambda: graph_matches(graph, reference), 90, "the memory before the forget", 0.5,
                       lambda: graph_difference(graph, reference) + "\n" + worker.tail())
            producer.send_command(ForgetCommand(tenant="acme", conversation_id="drop"))
            producer.send_command(ForgetCommand(tenant="globex"))

            def gone() -> bool:
                return all(not graph_snapshot(graph, key)["events"] for key in forgotten) and graph_matches(graph, kept)

            wait_until(gone, 60, "the forgotten conversations to leave the graph", 0.3, worker.tail)
        finally:
            graph.close()

    # The tables: the conversation-memory changelog ends with a tombstone (null) for each forgotten key, and the
    # forget-tombstones table holds the forget's position in every partition.
    def last_values() -> dict[bytes, bytes | None]:
        return {r.key: r.value for r in stream_run.read_topic(changelog_topic(settings, MEMORY_TABLE), idle_s=0.7)}

    wait_until(lambda: all(last_values().get(k.encode(), b"") is None for k in forgotten), 30,
               "null changelog records for the forgotten conversations", 0.5, lambda: str(list(last_values())))
    assert last_values()[b"acme/keep"] is not None
    tombstones = {r.key for r in stream_run.read_topic(changelog_topic(settings, TOMBSTONE_TABLE), idle_s=0.7)}
    assert {f"{p}|acme/drop".encode() for p in range(PARTITIONS)} <= tombstones
    assert {f"{p}|globex".encode() for p in range(PARTITIONS)} <= tombstones
    worker.kill9()
    group = settings.kafka_app_id

    def check_stores(data: Path) -> None:
        with stream_run.open_stores(data) as stores:
            for key in forgotten:
                tenant, conversation_id = key.split("/")
                assert stores.vectors.conversation_events(tenant, conversation_id) == [], f"{key}: events remain"
                assert stores.vectors.conversation_turns(tenant, conversation_id) == [], f"{key}: turns remain"
                assert not graph_snapshot(stores.graph, key)["events"], f"{key}: graph events remain"
            assert_stores_equal(stores.vectors, stores.graph, kept)

    check_stores(data_dir)

    # Replay 1: the same worker group from offset 0, its tables recovered from their changelogs.
    assert committed_offsets(stream_run, group, settings.turns_topic) == dict.fromkeys(range(PARTITIONS), 0)
    replay = stream_run.start_worker("forget-replay", data_dir, COMPASSMEM_LOG_LEVEL="DEBUG")
    replay.wait_assigned()
    wait_until(lambda: committed_offsets(stream_run, group, settings.turns_topic)
               == true_end_offsets(stream_run, settings.turns_topic), 90, "the replay to reach the end of the log",
               0.5, replay.stacks)
    replay.stop()
    totals = replay.batch_totals()
    assert totals.get("forgotten_dropped", 0) > 0 and totals.get("replayed_skipped", 0) > 0, totals
    assert totals.get("applied", 0) == 0, f"the replay rebuilt something: {totals}"
    check_stores(data_dir)

    # Replay 2: rebuilding from scratch, a new group with empty tables and empty stores; the forget markers in the
    # turns log delete the forgotten conversations again at their position.
    with EmbeddedFalkorDB(stream_run.root / "falkordb-rebuild") as fresh_graph:
        rebuild_dir = stream_run.root / "rebuild-data"
        rebuild = stream_run.start_worker("forget-rebuild", rebuild_dir, app_id=f"{stream_run.name}-rebuild",
                                          COMPASSMEM_FALKORDB_URL=fresh_graph.url)
        rebuild.wait_assigned()
        wait_until(lambda: committed_offsets(stream_run, f"{stream_run.name}-rebuild", settings.turns_topic)
                   == true_end_offsets(stream_run, settings.turns_topic), 90, "the rebuild to reach the end of the log",
                   0.5, rebuild.stacks)
        rebuild.stop()
        with open_stores(stream_run.settings(rebuild_dir, falkordb_url=fresh_graph.url)) as stores:
            for key in forgotten:
                tenant, conversation_id = key.split("/")
                assert stores.vectors.conversation_events(tenant, conversation_id) == [], f"{key} came back"
                assert not graph_snapshot(stores.graph, key)["events"], f"{key} came back in the graph"
            assert_stores_equal(stores.vectors, stores.graph, kept)


# -- freshness ---------------------------------------------------------------------------------------------------


def test_a_turn_is_searchable_at_once_and_an_idle_segment_closes(stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    turns = stream_conversation("fresh", 6)
    reference = reference_snapshots(turns, embedder)
    vectors_by_turn = dict(zip((t.turn_id for t in turns), embedder.embed([t.search_text() for t in turns]),
                               strict=True))
    settings = stream_run.settings()
    latencies: list[float] = []
    scope = SearchScope.conversation("default", "fresh")
    with open_stores(settings) as stores:
        worker = InProcessWorker(settings, stream_run.bootstrap, stores, embedder).start()
        try:
            wait_until(lambda: worker.streaming.assigned_partitions, 60, "the in-process worker's partitions")
            with stream_run.producer() as producer:
                for turn in turns:
                    sent = time.monotonic()
                    producer.produce([turn])
                    query = vectors_by_turn[turn.turn_id].tolist()

                    def found(turn_id: str = turn.turn_id, query: list[float] = query):  # noqa: ANN202
                        # Queryable = a query can return the turn id: its own turn point must exist too.
                        turn_hits, event_hits = stores.vectors.hits(scope, [HitSearch("turn", query, 10),
                                                                            HitSearch("event", query, 10)])
                        if turn_id not in {h.turn_id for h in turn_hits if isinstance(h, TurnHit)}:
                            return None
                        events = stores.vectors.get_events("default", [h.event_id for h in event_hits])
                        return next((e for e in events if turn_id in e.turn_ids), None)

                    event = wait_until(found, 5, f"turn {turn.turn_id} to be searchable", 0.02)
                    latencies.append(time.monotonic() - sent)
            assert event.provisional, "the newest turn should be in the open segment's provisional event"
            last_turn = time.monotonic()

            def closed() -> bool:
                events = stores.vectors.conversation_events("default", "fresh")
                return bool(events) and not any(e.provisional for e in events) and graph_matches(stores.graph, reference)

            wait_until(closed, settings.idle_close_s + 10, "the idle open segment to be closed into its event", 0.1,
                       lambda: graph_difference(stores.graph, reference))
            closed_after = time.monotonic() - last_turn
            time.sleep(0.5)
            assert_stores_equal(stores.vectors, stores.graph, reference)
        finally:
            worker.stop()
    assert max(latencies) < 3.0, f"slowest produce-to-searchable: {max(latencies):.2f} s"
    assert settings.idle_close_s <= closed_after + 0.5, f"closed after {closed_after:.1f} s, before the idle time"
    assert worker.streaming.totals["idle_closed"] >= 1


def test_an_in_process_worker_that_cannot_be_built_says_why_at_once(tmp_path: Path) -> None:
    from compassmem.core.config import Settings

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="failed to start: .*vectors"):
        # No stores: building the worker fails on its thread; start() must raise that, not wait out its timeout.
        worker = InProcessWorker(Settings(_env_file=None, data_dir=tmp_path), "127.0.0.1:1",
                                 None, None)  # type: ignore[arg-type]
        worker.start(timeout_s=20)
    assert time.monotonic() - started < 10
