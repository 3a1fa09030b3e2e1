"""No turn is ever lost: worker restarts with a backlog, a consumer that skips ahead, forgets read again.

Run against the dev broker (Tansu, memory-only) and against a second, independent Kafka-protocol implementation
that persists to disk (noida-db), so that a quirk of one broker can neither hide nor cause a lost turn. The
reference memory is the in-process pipeline's over the same turns (see test_streaming.py).
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2
from prometheus_client import generate_latest

from compassmem.core.contracts.commands import ForgetCommand
from compassmem.sinks.factory import open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.streams.faust_fixes import transport
from compassmem.streams.runner import InProcessWorker

from conftest import StreamRun, interleave, reference_snapshots, stream_conversation, wait_until
from noida_broker import NoidaBroker
from prometheus_text import parse_samples, total
from test_streaming import (
    assert_stores_equal,
    committed_offsets,
    graph_difference,
    graph_matches,
    join_producer,
    produce_in_background,
    true_end_offsets,
)

pytestmark = pytest.mark.timeout(420)


@pytest.fixture(scope="module")
def noida(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoidaBroker]:
    root = tmp_path_factory.mktemp("noida")
    with NoidaBroker(root / "data", root / "noida.log") as broker:
        yield broker


@pytest.fixture(params=["tansu", "noida"])
def any_broker_run(request: pytest.FixtureRequest, stream_broker,  # noqa: ANN001
                   tmp_path: Path) -> Iterator[tuple[StreamRun, NoidaBroker | None]]:
    """A fresh run (own topics, group and FalkorDB) on the dev broker, or on noida-db (then with the broker, which
    the test may restart: it keeps its data on disk)."""
    noida = request.getfixturevalue("noida") if request.param == "noida" else None
    bootstrap = noida.bootstrap if noida is not None else stream_broker.bootstrap
    with EmbeddedFalkorDB(tmp_path / "falkordb") as falkordb:
        run = StreamRun(name=f"run-{uuid.uuid4().hex[:8]}", bootstrap=bootstrap, root=tmp_path, falkordb=falkordb)
        run.ensure_topics()
        try:
            yield run, noida
        finally:
            run.stop_all()


def _backlog_turns() -> list:
    return interleave([stream_conversation(f"backlog-{i}", i, sessions=8) for i in range(8)], seed=13)


def test_restarts_with_a_backlog_lose_no_turn(any_broker_run: tuple[StreamRun, NoidaBroker | None],
                                             embedder) -> None:  # noqa: ANN001
    """The reported case: 150 turns applied, SIGTERM, a backlog produced while no worker runs, restart; then a
    stop at a random moment of the backlog and another restart. Every turn must be in both stores.

    On the dev broker the second stop is a kill -9. noida-db never expires the session of a member that died
    without leaving (a new member then waits forever to join), so there the stop is a SIGTERM, and the broker
    itself is restarted while no worker runs (it keeps topics, offsets and groups on disk)."""
    run, noida = any_broker_run
    turns = _backlog_turns()
    reference = reference_snapshots(turns, embedder)
    data_dir = run.root / "worker-data"
    # No idle close before the end: stopped workers make conversations look idle, and closes would then depend on
    # timing (the reference closes segments at the end only). The last worker closes them at the end of the log.
    no_idle = {"COMPASSMEM_IDLE_CLOSE_S": "3600"}
    first = run.start_worker("backlog-1", data_dir, **no_idle)
    first.wait_assigned()
    join_producer(produce_in_background(run, turns[:150], rate=None))
    wait_until(lambda: first.batch_totals().get("applied", 0) >= 150, 90, "150 turns applied", 0.2, first.tail)
    first.stop()
    if noida is not None:
        noida.restart()

    join_producer(produce_in_background(run, turns[150:], rate=None))
    second = run.start_worker("backlog-2", data_dir, **no_idle)
    second.wait_assigned()
    kill_after = random.Random(7).randint(20, 200)
    wait_until(lambda: second.batch_totals().get("applied", 0) >= kill_after, 90, f"{kill_after} turns applied",
               0.05, second.tail)
    if noida is None:
        second.kill9()
    else:
        second.stop()

    third = run.start_worker("backlog-3", data_dir)
    third.wait_assigned()
    graph = FalkorDBGraphStore.from_embedded(run.falkordb)
    try:
        wait_until(lambda: graph_matches(graph, reference), 150, "every turn in the graph", 0.5,
                   lambda: graph_difference(graph, reference) + "\n" + third.tail(40))
    finally:
        graph.close()
    third.stop()
    with run.open_stores(data_dir) as stores:
        assert_stores_equal(stores.vectors, stores.graph, reference)
        stored = sum(len(stores.vectors.conversation_turns("default", f"backlog-{i}")) for i in range(8))
    assert stored == len(turns), f"{len(turns)} turns produced, {stored} stored"
    for worker in (first, second, third):
        assert worker.batch_totals().get("dead_letters", 0) == 0, worker.tail()


def test_records_lost_inside_the_consumer_are_caught_and_read_again(
        stream_run: StreamRun, embedder, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Whatever loses records between the fetch and the agent (as Faust's recovery did), the worker never applies
    past the hole: here the worker's own Kafka consumer silently drops 30 fetched records of one partition."""
    turns = _backlog_turns()
    reference = reference_snapshots(turns, embedder)
    # The reference closes segments at the end only. Held back at the hole, a conversation can look idle for a few
    # seconds on a loaded machine, and a close there would cut it differently: the close comes only once the whole
    # log is read.
    settings = stream_run.settings(idle_close_s=10)
    lose = {"partition": None, "left": 0}
    lost: list[int] = []
    original = transport._Consumer.getmany  # noqa: SLF001

    async def lossy_getmany(self, timeout: float):  # noqa: ANN001, ANN202 - the consumer's own signature
        async for tp, message in original(self, timeout):
            if tp.topic == settings.turns_topic and tp.partition == lose["partition"] and lose["left"] > 0:
                lose["left"] -= 1
                lost.append(message.offset)
                continue
            yield tp, message

    monkeypatch.setattr(transport._Consumer, "getmany", lossy_getmany)  # noqa: SLF001
    with open_stores(settings) as stores:
        worker = InProcessWorker(settings, stream_run.bootstrap, stores, embedder).start()
        try:
            wait_until(lambda: worker.streaming.assigned_partitions, 60, "the in-process worker's partitions")
            streaming = worker.streaming
            with stream_run.producer() as producer:
                producer.produce(turns[:200])
                wait_until(lambda: streaming.totals["applied_turns"] >= 200, 60, "200 turns applied")
                # The partition most of the remaining turns go to (the producer's murmur2 of the key).
                per_partition = Counter((murmur2(t.key.encode()) & 0x7FFFFFFF) % settings.kafka_partitions
                                        for t in turns[200:])
                lose["partition"], lose["left"] = per_partition.most_common(1)[0][0], 30
                producer.produce(turns[200:])
            wait_until(lambda: graph_matches(stores.graph, reference), 120, "every turn despite the lost records",
                       0.5, lambda: graph_difference(stores.graph, reference))
            samples = parse_samples(generate_latest(streaming.metrics.registry).decode())
        finally:
            worker.stop()
        assert_stores_equal(stores.vectors, stores.graph, reference)
    assert len(lost) == 30, f"the consumer dropped {len(lost)} records, not 30"
    assert total(samples, "compassmem_offset_gaps_total") >= 1, "the hole was not detected"
    assert worker.streaming.totals["dead_letters"] == 0


def test_a_forget_read_again_under_another_app_id_keeps_memory_built_after_it(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    """Forget a conversation, produce it again (a new memory), then start a worker with another app id on the same
    stores: it reads the control topic from the start and must not run the old forget again."""
    before = stream_conversation("again", 1)
    after = stream_conversation("again", 6, sessions=2)  # the same conversation id, other turns
    other = stream_conversation("bystander", 2)
    reference_after = reference_snapshots(after + other, embedder)
    data_dir = stream_run.root / "worker-data"
    first = stream_run.start_worker("forget-1", data_dir)
    first.wait_assigned()
    graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
    try:
        with stream_run.producer() as producer:
            producer.produce(interleave([before, other]))
            wait_until(lambda: graph_matches(graph, reference_snapshots(before + other, embedder)), 90,
                       "the first memory", 0.5, first.tail)
            producer.send_command(ForgetCommand(tenant="default", conversation_id="again"))
            wait_until(lambda: graph_matches(graph, {"default/bystander": reference_after["default/bystander"]})
                       and not graph.conversation_graph("default", "again").number_of_nodes(),
                       60, "the forget", 0.3, first.tail)
            producer.produce(after)
            wait_until(lambda: graph_matches(graph, reference_after), 90, "the memory built after the forget", 0.5,
                       first.tail)
        first.stop()

        second = stream_run.start_worker("forget-2", data_dir, app_id=f"{stream_run.name}-other")
        second.wait_assigned()
        wait_until(lambda: "stream.forget_already_executed" in second.log(), 60,
                   "the second app id to read the old forget", 0.3, second.tail)
        # It replays the whole turns log too: the first memory is built and forgotten at the marker, then rebuilt,
        # and both conversations' last segments close when they go idle (markers at the end of the log).
        topic = stream_run.settings().turns_topic

        def replayed() -> bool:
            return (second.batch_totals().get("idle_closed", 0) >= 2
                    and committed_offsets(stream_run, f"{stream_run.name}-other", topic)
                    == true_end_offsets(stream_run, topic)
                    and graph_matches(graph, reference_after))

        wait_until(replayed, 120, "the replay to reach the end of the log with the memory built after the forget",
                   0.5, lambda: graph_difference(graph, reference_after) + "\n" + second.tail())
        second.stop()
    finally:
        graph.close()
    with stream_run.open_stores(data_dir) as stores:
        assert_stores_equal(stores.vectors, stores.graph, reference_after)


def test_a_graph_store_that_goes_down_is_waited_for_not_crashed_on(stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    """FalkorDB stops while turns keep coming: the worker keeps running, retries the same batch, and once the
    server is back every turn is in both stores (no crash loop, nothing skipped or dead-lettered)."""
    before = interleave([stream_conversation("up-1", 1), stream_conversation("up-2", 2)])
    during = stream_conversation("down-1", 3)
    reference = reference_snapshots(before + during, embedder)
    data_dir = stream_run.root / "worker-data"
    worker = stream_run.start_worker("store-down", data_dir)
    worker.wait_assigned()
    graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
    try:
        with stream_run.producer() as producer:
            producer.produce(before)
            wait_until(lambda: graph_matches(graph, {k: reference[k] for k in ("default/up-1", "default/up-2")}),
                       90, "the memory before the outage", 0.5, worker.tail)
            stream_run.falkordb.stop()
            producer.produce(during)
            wait_until(lambda: "stream.store_unavailable" in worker.log(), 60, "the worker to wait for the store",
                       0.3, worker.tail)
            time.sleep(3.0)  # a few retries while the server is down
            assert worker.process.poll() is None, f"the worker exited while the store was down\n{worker.tail()}"
        stream_run.falkordb.start()
        wait_until(lambda: graph_matches(graph, reference), 120, "every turn once the store is back", 0.5,
                   lambda: graph_difference(graph, reference) + "\n" + worker.tail())
    finally:
        graph.close()
    worker.stop()
    assert worker.batch_totals().get("dead_letters", 0) == 0, worker.tail()
    with stream_run.open_stores(data_dir) as stores:
        assert_stores_equal(stores.vectors, stores.graph, reference)
