"""Runtime settings without a restart: a change is a record on the control topic (``PUT /v1/config/{key}``,
``compassmem config set``), applied by every worker at its marker in each turns partition and by every API process as
it reads the control topic. Two workers and an API on the session's broker: turns before the change keep the old
value, turns after it get the new one, and a replay by a new consumer group into empty stores builds the same
memory."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from compassmem.core.config import Settings
from compassmem.core.contracts.commands import CONTROL_COMMAND, SettingCommand
from compassmem.core.contracts.dead_letters import DeadLetter, DeadLetterReason, DeadLetterStage
from compassmem.library.memory import Memory
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.write.pipeline import PipelineConfig
from compassmem.processors.segmentation import SegmentationConfig
from compassmem.publish.producer import encode_turn
from compassmem.publish.publisher import KafkaTurnPublisher
from compassmem.query_api.app import create_app
from compassmem.query_api.change_listener import ChangeFeedListener
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.library.runtime_settings import SPECS, SettingValueError, setting_command
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.streams.decoding import RawRecord
from compassmem.publish.command_answers import command_answer
from compassmem.streams.forget_log import settings_in_force
from compassmem.core.contracts.stream_records import CONTROL_HEADER, ControlKind, IdleCloseMarker, SettingMarker
from compassmem.streams.processor import BatchInput, BatchOutput, MemoryStreamProcessor
from conftest import (
    StreamRun,
    WorkerProcess,
    describe_difference,
    expected_snapshot,
    interleave,
    reference_snapshots,
    stores_snapshot,
    stream_conversation,
    wait_until,
)
from test_streaming import PARTITIONS, graph_difference, graph_matches, replayed, spread_ids

ADMIN_KEY, TENANT_KEY = "admin-secret-runtime", "acme-secret-runtime"
# Thresholds of 0 cut before every turn the rules let the scores decide: most turns become their own event.
EVERY_TURN = {"segmentation.shift_threshold": 0.0, "segmentation.request_threshold": 0.0}


@contextlib.contextmanager
def api_on(run: StreamRun, embedder, data_dir: Path) -> Iterator[tuple[httpx.Client, Memory]]:  # noqa: ANN001
    """An API process's parts on the run's stream (as ``compassmem api`` wires them), served on a free port; yields
    a client with the admin key and the API's ``Memory``."""
    settings = run.settings(data_dir, api_admin_keys=[ADMIN_KEY], api_keys={"acme": TENANT_KEY})
    publisher = KafkaTurnPublisher(run.bootstrap, settings.turns_topic, settings.control_topic)
    with open_stores(settings, dim=embedder.dim) as stores:
        services = build_services(settings, stores, embedder, MemoryMetrics(process_collectors=False),
                                  turn_publisher=publisher, control_publisher=publisher)
        listener = ChangeFeedListener(run.bootstrap, settings, services.memory.hot,
                                      runtime=services.memory.runtime).start()
        try:
            with BackgroundServer(create_app(services)) as server, \
                    httpx.Client(base_url=server.url, timeout=30,
                                 headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
                yield api, services.memory
        finally:
            listener.stop()
            services.memory.close()
            publisher.close()


def in_force(api: httpx.Client) -> dict[str, dict]:
    answer = api.get("/v1/config")
    assert answer.status_code == 200, answer.text
    return {entry["key"]: entry for entry in answer.json()["settings"]}


def merged_stores(run: StreamRun, dirs: list[Path], keys: list[str]) -> dict[str, dict]:
    """Each conversation's memory from whichever worker's embedded vector store holds it."""
    merged: dict[str, dict] = {}
    for data_dir in dirs:
        with run.open_stores(data_dir) as stores:
            for key in keys:
                snapshot = stores_snapshot(stores.vectors, stores.graph, key)
                if snapshot["events"]:
                    assert key not in merged, f"{key} was built by both workers"
                    merged[key] = snapshot
    return merged


# -- the worker's batch step, without a broker --------------------------------------------------------------------


def _log(conversation_id: str, with_change: bool) -> list[RawRecord]:
    """One conversation's records on turns partition 0: its first two sessions, the markers of EVERY_TURN (when
    ``with_change``), its third session, an idle close."""
    turns = stream_conversation(conversation_id, 3)
    key = f"default/{conversation_id}".encode()
    values = [(encode_turn(turn)[1], ()) for turn in turns[:16]]
    if with_change:
        for setting, value in EVERY_TURN.items():
            marker = SettingMarker(setting=setting_command(setting, value), source_partition=0, source_offset=0)
            values.append((marker.model_dump_json().encode(), ((CONTROL_HEADER, ControlKind.SETTING.value.encode()),)))
    values += [(encode_turn(turn)[1], ()) for turn in turns[16:]]
    close = IdleCloseMarker(tenant="default", conversation_id=conversation_id, after_offset=len(values) - 1, idle_s=1)
    values.append((close.model_dump_json().encode(), ((CONTROL_HEADER, ControlKind.IDLE_CLOSE.value.encode()),)))
    return [RawRecord(topic="t.turns", partition=0, offset=n, key=key, value=value, headers=headers)
            for n, (value, headers) in enumerate(values)]


def _events(stores: Stores, conversation_id: str) -> list[tuple[str, ...]]:
    return sorted(tuple(event.turn_ids) for event in stores.vectors.conversation_events("default", conversation_id))


@pytest.fixture
def processor_stores(tmp_path: Path, embedded_falkordb) -> Iterator[Stores]:  # noqa: ANN001
    with open_stores(Settings(_env_file=None, data_dir=tmp_path, falkordb_url=embedded_falkordb.url)) as opened:
        yield opened


def test_a_setting_marker_changes_the_turns_after_it_however_the_log_is_batched(
        processor_stores: Stores, embedder) -> None:  # noqa: ANN001
    processor = MemoryStreamProcessor(embedder, processor_stores)

    def apply(batch: BatchInput, isolating: bool = False) -> BatchOutput:
        step = processor.process_isolating if isolating else processor.process
        return processor.sinks.write(partial(step, batch))

    apply(BatchInput(records=_log("plain", with_change=False), states={}, tombstones={}))
    apply(BatchInput(records=_log("whole", with_change=True), states={}, tombstones={}))
    plain, whole = _events(processor_stores, "plain"), _events(processor_stores, "whole")
    early = {turn.turn_id for turn in stream_conversation("x", 3)[:16]}
    # The first two sessions are built alike; the third, after the change, is cut before most of its turns.
    assert [e for e in whole if set(e) <= early] == [e for e in plain if set(e) <= early]
    assert len(whole) > len(plain)
    assert max(len(e) for e in whole if not set(e) & early) < max(len(e) for e in plain if not set(e) & early)

    # Split at every place around the markers, the second part on a new processor (a restart, or another worker
    # taking the partition over) from the table state and the partition's settings: the same memory. The record
    # before the split comes again (a redelivery) and is skipped, a marker as a turn.
    records = _log("split", with_change=True)
    in_force = {16: None, 17: {"segmentation.shift_threshold": 0.0}, 18: EVERY_TURN}
    for cut, values in in_force.items():
        first = apply(BatchInput(records=records[:cut], states={}, tombstones={}))
        (state, _), = first.states.values()
        assert (first.settings[0].values if first.settings else None) == values
        processor = MemoryStreamProcessor(embedder, processor_stores)
        again = apply(BatchInput(records=records[cut - 1:], states={"default/split": state}, tombstones={},
                                 settings=first.settings), isolating=cut == 18)
        assert again.stats.replayed_skipped == (1 if cut == 16 else 0)
        assert _events(processor_stores, "split") == whole, f"split at {cut}"
        processor_stores.vectors.delete_conversation("default", "split")
        processor_stores.graph.delete_conversation("default", "split")
        processor = MemoryStreamProcessor(embedder, processor_stores)


def test_a_boundary_setting_changed_under_a_backlog_applies_after_its_marker_and_replays_the_same(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    before = interleave([stream_conversation(c, i, sessions=2) for i, c in enumerate(spread_ids("old-", 4))], seed=11)
    after = interleave([stream_conversation(c, 10 + i, sessions=2) for i, c in enumerate(spread_ids("new-", 4))],
                       seed=12)
    every_turn = PipelineConfig(segmentation=SegmentationConfig(shift_threshold=0.0, request_threshold=0.0))
    expected = {**reference_snapshots(before, embedder), **reference_snapshots(after, embedder, every_turn)}
    by_default = reference_snapshots(after, embedder)
    for key, memory in by_default.items():  # what the change is expected to do: more, smaller events
        assert len(expected[key]["events"]) > len(memory["events"]), key  # type: ignore[arg-type]

    dirs = [stream_run.root / "worker-a", stream_run.root / "worker-b"]
    workers = [stream_run.start_worker("settings-a", dirs[0]), stream_run.start_worker("settings-b", dirs[1])]
    for worker in workers:
        worker.wait_assigned()

    def split() -> bool:
        a, b = (set(w.assigned_partitions() or ()) for w in workers)
        return bool(a) and bool(b) and not a & b and a | b == set(range(PARTITIONS))

    wait_until(split, 60, "the two workers to split the partitions", 0.3, lambda: _tails(workers))
    with api_on(stream_run, embedder, stream_run.root / "api-data") as (api, memory):
        with stream_run.producer() as producer:
            producer.produce(before)
        # At once, while the workers work through that backlog: the markers land after its turns in every partition.
        recorded = {}
        for key, value in EVERY_TURN.items():
            answer = api.put(f"/v1/config/{key}", json={"value": value})
            assert answer.status_code == 202, answer.text
            recorded[key] = answer.json()
            assert recorded[key]["setting"] == key and recorded[key]["value"] == value

        def marked() -> bool:
            shown = in_force(api)
            return all(shown[key]["change"] and len(shown[key]["change"]["markers"]) == PARTITIONS
                       for key in EVERY_TURN)

        wait_until(marked, 60, "the workers to mark both changes in every turns partition", 0.3,
                   lambda: str(in_force(api)) + "\n" + _tails(workers))
        shown = in_force(api)
        for key, value in EVERY_TURN.items():
            assert shown[key]["value"] == value and shown[key]["origin"] == "runtime"
            assert shown[key]["scope"] == "workers"
            assert shown[key]["change"]["control_offset"] == recorded[key]["control_offset"]
        assert shown["hot_tier.max_turns"]["origin"] == "default"
        assert shown["ranking.fitted"] == {**shown["ranking.fitted"], "value": True, "origin": "default"}

        # A read-path key: this API process applies it as it reads the control topic.
        assert api.put("/v1/config/ranking.fitted", json={"value": False}).status_code == 202
        wait_until(lambda: in_force(api)["ranking.fitted"]["value"] is False, 30, "the API to apply ranking.fitted")
        assert memory.engine.config.ranking.fitted is False

        with stream_run.producer() as producer:
            producer.produce(after)
        graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
        try:
            wait_until(lambda: graph_matches(graph, expected), 120, "the memory built before and after the change",
                       0.5, lambda: graph_difference(graph, expected) + "\n" + _tails(workers))
        finally:
            graph.close()
    for worker in workers:
        worker.stop()
    assert all("stream.setting_applied" in worker.log() for worker in workers)
    merged = merged_stores(stream_run, dirs, sorted(expected))
    for key, reference in expected.items():
        assert merged.get(key) == expected_snapshot(reference), \
            f"{key}:\n{describe_difference(expected_snapshot(reference), merged.get(key, {}))}"

    # A new consumer group with empty tables and stores reads the turns log from the start: the setting markers
    # sit where they took effect, so it builds the same memory.
    with replayed(stream_run, "settings-replay") as (stores, replay):
        for key, reference in expected.items():
            assert stores_snapshot(stores.vectors, stores.graph, key) == expected_snapshot(reference), \
                f"replay, {key}:\n{replay.tail()}"


def _tails(workers: list[WorkerProcess]) -> str:
    return "\n".join(worker.tail(10) for worker in workers)


def test_bad_settings_and_keys_are_refused_over_http_and_by_the_cli(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    with api_on(stream_run, embedder, stream_run.root / "api-data") as (api, _):
        out_of_range = api.put("/v1/config/segmentation.shift_threshold", json={"value": 1.5})
        assert out_of_range.status_code == 422
        assert out_of_range.json()["detail"] == [{
            "field": "value", "message": "setting 'segmentation.shift_threshold' must be a finite number at least 0.0 "
                                        "and at most 1.0 (got 1.5)"}]
        not_a_switch = api.put("/v1/config/llm.events", json={"value": "maybe"})
        assert not_a_switch.status_code == 422 and "true or false" in not_a_switch.json()["detail"][0]["message"]
        too_small = api.put("/v1/config/hot_tier.max_turns", json={"value": 5})
        assert too_small.status_code == 422 and "at least 100" in too_small.json()["detail"][0]["message"]
        unknown = api.put("/v1/config/segmentation.nothing", json={"value": 1})
        assert unknown.status_code == 422 and unknown.json()["detail"][0]["field"] == "key"
        assert "segmentation.shift_threshold" in unknown.json()["detail"][0]["message"]
        assert api.put("/v1/config/llm.events", json={"value": False, "extra": 1}).status_code == 422

        tenant = {"Authorization": f"Bearer {TENANT_KEY}"}
        assert api.put("/v1/config/llm.events", json={"value": False}, headers=tenant).status_code == 403
        assert api.get("/v1/config", headers=tenant).status_code == 403
        assert api.put("/v1/config/llm.events", json={"value": False}, headers={"Authorization": ""}).status_code \
            == 401

        # The command line: the same rule, a non-zero exit; a good value is recorded and shown with its origin.
        env = stream_run.env(stream_run.root / "cli-data")

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "compassmem.cli", "config", *args], env=env,  # noqa: S603
                                  capture_output=True, text=True, timeout=120, check=False)

        bad = cli("set", "segmentation.shift_threshold", "2")
        assert bad.returncode == 2, bad.stderr
        assert "setting 'segmentation.shift_threshold' must be a finite number at least 0.0 and at most 1.0 (got '2')" \
            in bad.stderr
        good = cli("set", "hot_tier.max_turns", "20000", "--wait", "0")
        assert good.returncode == 0, good.stderr
        wait_until(lambda: in_force(api)["hot_tier.max_turns"]["value"] == 20000, 30, "the API to apply the CLI's")
        shown = cli("show")
        assert shown.returncode == 0, shown.stderr
        lines = {line.split(" = ")[0]: line for line in shown.stdout.splitlines()}
        assert set(lines) == set(SPECS)
        assert lines["hot_tier.max_turns"].startswith("hot_tier.max_turns = 20000  (runtime at ")
        assert "(default; workers; a finite number at least 0.0 and at most 1.0)" in lines["segmentation.shift_threshold"]
    # Nothing refused reached the control topic: only the CLI's change.
    settings = stream_run.settings()
    commands = [CONTROL_COMMAND.validate_json(record.value) for record in stream_run.read_topic(settings.control_topic)
                if b'"command"' in record.value]
    assert [(c.setting, c.value) for c in commands if isinstance(c, SettingCommand)] == [("hot_tier.max_turns", 20000)]
    assert len(commands) == 1


# -- values JSON cannot carry: infinity and NaN --------------------------------------------------------------------

NUMERIC_KEYS = [key for key, spec in SPECS.items() if spec.rule != "true or false"]
# Every way a value past the finite numbers arrives: a float, the text the CLI passes on, JSON's overflowing number.
NOT_FINITE = [math.inf, -math.inf, math.nan, 1e309, "inf", "-Infinity", "nan", "1e400"]


@pytest.mark.parametrize("key", NUMERIC_KEYS)
@pytest.mark.parametrize("value", NOT_FINITE, ids=repr)
def test_every_numeric_setting_refuses_infinity_and_nan_naming_the_key_and_the_rule(key: str, value: object) -> None:
    with pytest.raises(SettingValueError) as refused:
        setting_command(key, value)
    assert str(refused.value).startswith(f"setting {key!r} must be {SPECS[key].rule} (got ")
    assert SPECS[key].rule.startswith(("a finite number", "a whole number")), "a numeric rule must be finite"


@pytest.mark.parametrize("number", ["1e309", "-1e309", "Infinity", "-Infinity", "NaN"])
def test_the_control_record_refuses_a_value_json_cannot_carry(number: str) -> None:
    """Any producer may write the control topic: the record's own model refuses what would be written back as
    null, whoever checked it before."""
    raw = f'{{"command": "set", "setting": "ranking.question_penalty", "value": {number}}}'
    with pytest.raises(ValidationError, match="finite"):
        CONTROL_COMMAND.validate_json(raw)
    with pytest.raises(ValidationError, match="finite"):
        SettingCommand(setting="ranking.question_penalty", value=float(number))
    good = SettingCommand(setting="ranking.question_penalty", value=0.5)
    assert CONTROL_COMMAND.validate_json(good.model_dump_json()) == good


def test_an_infinite_setting_is_refused_over_http_the_library_and_the_cli_before_it_is_written(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    key = "ranking.question_penalty"
    rule = f"setting {key!r} must be a finite number at least 0.0"
    with api_on(stream_run, embedder, stream_run.root / "api-data") as (api, memory):
        for raw, shown in (("Infinity", "inf"), ("-Infinity", "-inf"), ("NaN", "nan"), ("1e309", "inf"),
                           ('"inf"', "'inf'"), ('"1e400"', "'1e400'")):
            answer = api.put(f"/v1/config/{key}", content=f'{{"value": {raw}}}',
                             headers={"Content-Type": "application/json"})
            assert answer.status_code == 422, (raw, answer.text)
            assert answer.json()["detail"] == [{"field": "value", "message": f"{rule} (got {shown})"}]
        with pytest.raises(SettingValueError, match="finite"):
            memory.set_setting(key, math.inf)
        assert in_force(api)[key]["value"] == 0.25 and in_force(api)[key]["rule"] == "a finite number at least 0.0"

        env = stream_run.env(stream_run.root / "cli-data")
        cli = subprocess.run([sys.executable, "-m", "compassmem.cli", "config", "set", key, "inf",  # noqa: S603
                              "--wait", "5"], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert cli.returncode == 2, cli.stderr
        assert cli.stderr.splitlines() == [f"error: {rule} (got 'inf')"]
    control = stream_run.read_topic(stream_run.settings().control_topic)
    assert control == [], "a refused setting reached the control topic"


def _produce_raw(bootstrap: str, topic: str, values: list[str]) -> list[int]:
    """Control records as any producer may write them, unchecked; their offsets."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        sent = [producer.send(topic, key=b"setting:raw", value=value.encode())
                for value in values]
        return [future.get(timeout=30).offset for future in sent]
    finally:
        producer.close()


def test_an_infinite_setting_on_the_control_topic_is_dead_lettered_and_never_applied_after_a_restart(
        stream_run: StreamRun) -> None:
    """Records a producer wrote before the worker (re)started, read from the topic's start: the good change is
    applied, the ones JSON cannot carry are dead-lettered with their reason, in the worker and in every reader."""
    settings = stream_run.settings()
    change = '{{"command": "set", "setting": "ranking.question_penalty", "value": {}}}'
    offsets = _produce_raw(stream_run.bootstrap, settings.control_topic,
                           [change.format(v) for v in ("0.5", "1e309", "Infinity", "NaN")])
    sentinel = SettingCommand(setting="ranking.turn_weight", value=0.4)
    offsets += _produce_raw(stream_run.bootstrap, settings.control_topic, [sentinel.model_dump_json()])

    worker = stream_run.start_worker("replayed", stream_run.root / "worker-data")
    answer = command_answer(stream_run.bootstrap, settings.control_topic, 0, offsets[-1], 120)
    assert answer is not None, worker.tail()
    letters = [DeadLetter.model_validate_json(record.value) for record in stream_run.read_topic(settings.dlq_topic)]
    assert [(d.offset, d.stage, d.reason_code) for d in letters] == [
        (offset, DeadLetterStage.CONTROL, DeadLetterReason.INVALID_FIELDS) for offset in offsets[1:4]]
    assert {d.reason for d in letters} == {"field 'set.value': Input should be a finite number"}

    markers = [json.loads(record.value)["setting"] for record in stream_run.read_topic(settings.turns_topic)]
    assert {(m["setting"], m["value"]) for m in markers} == {(sentinel.setting, 0.4), ("ranking.question_penalty",
                                                                                        0.5)}
    shown = {entry.key: entry for entry in settings_in_force(stream_run.bootstrap, settings).in_force()}
    assert shown["ranking.question_penalty"].value == 0.5
    assert shown["ranking.question_penalty"].change.control_offset == offsets[0]
    worker.stop()
