"""The Turn schema refuses what the stores cannot hold, at every boundary that shares it.

``compassmem.core.models.Turn`` is the one schema of POST /v1/turns, the turns-topic decoder and the JSONL importer:
U+0000 and other control characters, lone surrogates, unbounded metadata, numeric timestamps and ids that read as
path segments are refused there, with the field and the rule named. The HTTP side is in tests/test_api_limits.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from compassmem.core.contracts.dead_letters import DeadLetter, DeadLetterReason
from compassmem.core.contracts.query import MAX_QUESTION_CHARS, QueryRequest
from compassmem.write.importers import ImportFormatError, read_jsonl_turns
from compassmem.core.models import (
    ID_PATTERN,
    MAX_ATTACHMENTS,
    MAX_CAPTION_CHARS,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEYS,
    MAX_TEXT_BYTES,
    MAX_URL_CHARS,
    TEXT_PATTERN,
    Turn,
    check_id,
)
from compassmem.publish.producer import encode_turn
from compassmem.retrieval.decomposition import MAX_SUBGOALS, analyse, with_subgoals
from compassmem.streams.decoding import RawRecord, TurnItem, decode_turns_record

GOOD: dict[str, Any] = {"tenant": "acme", "conversation_id": "c1", "turn_id": "t1", "speaker": "Ann",
                        "text": "We moved the launch to May.", "timestamp": "2024-03-04T09:15:00+00:00"}


def errors_of(**change: Any) -> list[tuple[str, str]]:
    """(field path, message) of each error for GOOD with ``change`` applied; [] when valid."""
    try:
        Turn.model_validate({**GOOD, **change})
    except ValidationError as error:
        return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in error.errors()]
    return []


def nested(depth: int) -> dict[str, Any]:
    """A metadata object ``depth`` levels deep (1 = a flat object)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_a_good_turn_and_free_text_whitespace_pass() -> None:
    assert errors_of() == []
    assert errors_of(text="line one\n\tline two\r\n", metadata={"note": "a\nb", "n": [1, 2.5, None, True]}) == []
    attachment = {"kind": "image", "caption": "a dog\non a beach", "url": "https://x.test/a.png"}
    assert errors_of(attachments=[attachment]) == []


@pytest.mark.parametrize(("change", "field"), [
    ({"text": "hello\u0000world"}, "text"),
    ({"text": "bell\u0007"}, "text"),
    ({"text": "escape\u001b[31m"}, "text"),
    ({"speaker": "Ann\u0000"}, "speaker"),
    ({"speaker": "Ann\nBob"}, "speaker"),
    ({"session_id": "s\u0000"}, "session_id"),
    ({"attachments": [{"caption": "a\u0000dog"}]}, "attachments.0.caption"),
    ({"attachments": [{"caption": "dog", "url": "http://x\u0000"}]}, "attachments.0.url"),
    ({"attachments": [{"caption": "dog", "kind": "im\u0000age"}]}, "attachments.0.kind"),
    ({"metadata": {"k": "v\u0000"}}, "metadata"),
    ({"metadata": {"k\u0000": "v"}}, "metadata"),
    ({"metadata": {"deep": [{"list": ["x", "y\u0000"]}]}}, "metadata"),
])
def test_nul_and_control_characters_are_refused_in_every_string_field(change: dict[str, Any], field: str) -> None:
    [(where, message)] = errors_of(**change)
    assert where == field
    assert "control characters" in message and "U+00" in message


@pytest.mark.parametrize(("change", "field"), [
    ({"text": "a\ud800b"}, "text"),
    ({"speaker": "\udfff"}, "speaker"),
    ({"attachments": [{"caption": "x\ud800"}]}, "attachments.0.caption"),
    ({"metadata": {"k": "v\ud800"}}, "metadata"),
    ({"metadata": {"k\udc00": "v"}}, "metadata"),
    ({"metadata": {"a": {"b": ["\ud83d"]}}}, "metadata"),
])
def test_lone_surrogates_are_refused(change: dict[str, Any], field: str) -> None:
    [(where, message)] = errors_of(**change)
    assert where == field
    assert "surrogate" in message or "unicode" in message


def test_surrogate_pairs_written_as_json_escapes_are_fine() -> None:
    # "\ud83d\ude00" is one character (an emoji) once decoded: valid, unlike a lone half.
    turn = Turn.model_validate(json.loads(json.dumps({**GOOD, "text": "smile \U0001f600"}, ensure_ascii=True)))
    assert turn.text.endswith("\U0001f600")


def test_metadata_nesting_is_bounded_even_far_past_the_recursion_limit() -> None:
    assert errors_of(metadata=nested(MAX_METADATA_DEPTH)) == []
    [(field, message)] = errors_of(metadata=nested(MAX_METADATA_DEPTH + 1))
    assert field == "metadata" and f"the limit is {MAX_METADATA_DEPTH}" in message
    deep: Any = "leaf"
    for _ in range(5000):  # far past Python's recursion limit
        deep = [deep]
    [(field, message)] = errors_of(metadata={"a": deep})
    assert field == "metadata" and "nested more than" in message


def test_metadata_size_and_key_count_are_bounded() -> None:
    [(field, message)] = errors_of(metadata={"blob": "x" * MAX_METADATA_BYTES})
    assert field == "metadata" and str(MAX_METADATA_BYTES) in message and "bytes" in message
    [(field, message)] = errors_of(metadata={f"k{i}": i for i in range(MAX_METADATA_KEYS + 1)})
    assert field == "metadata" and f"the limit is {MAX_METADATA_KEYS}" in message
    assert errors_of(metadata={f"k{i}": i for i in range(MAX_METADATA_KEYS)}) == []


@pytest.mark.parametrize(("value", "rule"), [
    (float("nan"), "finite"), (float("inf"), "finite"), (2**70, "64 bits"), (object(), "JSON values"),
])
def test_metadata_holds_only_json_values(value: object, rule: str) -> None:
    [(field, message)] = errors_of(metadata={"v": value})
    assert field == "metadata" and rule in message


def test_attachments_are_bounded() -> None:
    assert errors_of(attachments=[{"caption": "x"}] * (MAX_ATTACHMENTS + 1))[0][0] == "attachments"
    assert errors_of(attachments=[{"caption": "x" * (MAX_CAPTION_CHARS + 1)}])[0][0] == "attachments.0.caption"
    assert errors_of(attachments=[{"caption": "x", "url": "u" * (MAX_URL_CHARS + 1)}])[0][0] == "attachments.0.url"


def test_the_largest_valid_turn_stays_far_below_the_kafka_record_limit() -> None:
    # Worst cases for JSON size: quotes double when escaped, 4-byte characters where only characters are counted.
    worst = Turn.model_validate({
        # Ids are ASCII; '"' is the costliest id character there is not ("|" and the rest escape to themselves).
        **GOOD, "conversation_id": "|" * 128, "turn_id": "|" * 128, "speaker": "\U0001f600" * 100,
        "session_id": "|" * 128, "subject_id": "|" * 128, "text": '"' * MAX_TEXT_BYTES,
        "attachments": [{"kind": "\U0001f600" * 64, "caption": "\U0001f600" * MAX_CAPTION_CHARS,
                         "url": "\U0001f600" * MAX_URL_CHARS}] * MAX_ATTACHMENTS,
        "metadata": {"m": '"' * (MAX_METADATA_BYTES // 2 - 10)},
    })
    size = len(worst.model_dump_json().encode("utf-8"))
    assert size < 512 * 1024 < 1_048_576  # Kafka's default max_request_size


@pytest.mark.parametrize("timestamp", [1700000000, 1700000000000, 1.7e9, "1700000000", True, None])
def test_timestamps_must_be_iso_8601_strings(timestamp: object) -> None:
    [(field, message)] = errors_of(timestamp=timestamp)
    assert field == "timestamp" and "ISO 8601" in message


def test_a_naive_timestamp_is_still_refused_and_python_datetimes_still_work() -> None:
    [(field, message)] = errors_of(timestamp="2024-03-04T09:15:00")
    assert field == "timestamp" and "offset" in message
    turn = Turn.model_validate({**GOOD, "timestamp": "2024-03-04T09:15:00+02:00"})
    assert Turn(**{**GOOD, "timestamp": turn.timestamp}) == turn


@pytest.mark.parametrize("bad", ["", " ", "\t", "   ", ".", "..", "a/b", "x" * 129, "a\u0000", "a\nb", "\u200b",
                                 "conv 26", "\u00dcn\u00efcode-id", "a-trip ", " a-trip", "a-trip\u00a0", "a#b", "a%20b"])
def test_bad_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_id(bad)
    fields = {f for f, _ in errors_of(conversation_id=bad, turn_id=bad)}
    assert fields == {"conversation_id", "turn_id"}


@pytest.mark.parametrize("good", ["c1", "D1:3", "...", ".a", "a.", "auth0|5f7c", "user+tag@example.test", "a=b~c",
                                  "x" * 128])
def test_ordinary_ids_pass(good: str) -> None:
    assert check_id(good) == good


@pytest.mark.parametrize("bad", ["", " ", "\t", ".", "..", "cust/42", "x" * 129, "a\u0000", "a\nb", "\u200b",
                                 "kunde 42"])
def test_bad_subject_ids_are_refused_naming_the_field(bad: str) -> None:
    [(field, message)] = errors_of(subject_id=bad)
    assert field == "subject_id"
    assert any(rule in message for rule in ("characters", "'.' or '..'", "ASCII letters, digits")), message


@pytest.mark.parametrize("bad", [42, 4.2, True, ["cust-42"], {"id": "cust-42"}])
def test_a_subject_id_must_be_a_string(bad: object) -> None:
    [(field, _)] = errors_of(subject_id=bad)
    assert field == "subject_id"


@pytest.mark.parametrize("good", ["cust-42", "acct:0017", "user@example.test", "...", "x" * 128])
def test_ordinary_subject_ids_pass_and_the_field_is_optional(good: str) -> None:
    assert Turn.model_validate({**GOOD, "subject_id": good}).subject_id == good
    assert Turn.model_validate(GOOD).subject_id is None
    assert Turn.model_validate({**GOOD, "subject_id": None}).subject_id is None


# -- look-alike names: "Alice" and "Alice\u200b" must not be two speakers ----------------------------------------

NAME_FIELDS = ["speaker", "conversation_id", "turn_id", "session_id", "subject_id"]


@pytest.mark.parametrize("field", NAME_FIELDS)
@pytest.mark.parametrize("char", ["\u200b", "\u200d", "\u202e", "\u2066", "\ufeff", "\u00ad", "\U000e0041"])
def test_format_characters_are_refused_in_names_and_ids(field: str, char: str) -> None:
    [(where, message)] = errors_of(**{field: f"Alice{char}"})
    assert where == field
    assert f"U+{ord(char):04X}" in message and "invisible format character" in message and "position 5" in message


@pytest.mark.parametrize("field", NAME_FIELDS)
def test_names_and_ids_are_nfkc_normalised(field: str) -> None:
    # Fullwidth letters and the Roman numeral one look like "AliceI": they are stored as it.
    assert getattr(Turn.model_validate({**GOOD, field: "\uff21lice\u2160"}), field) == "AliceI"


def test_normalising_cannot_smuggle_in_what_the_id_rules_refuse() -> None:
    assert {f for f, _ in errors_of(conversation_id="a\uff0fb", turn_id="\uff0e")} == {"conversation_id", "turn_id"}
    # One character whose NFKC form is 18: the limit is on what is stored.
    [(field, message)] = errors_of(speaker="\ufdfa" * 6)
    assert field == "speaker" and "at most 100" in message


def test_a_tenant_with_a_format_character_is_refused() -> None:
    [(field, _)] = errors_of(tenant="acme\u200b")
    assert field == "tenant"


def test_text_keeps_joiners_it_needs_as_written() -> None:
    # Text is content, not a name: a ZWJ emoji sequence and a ZWNJ in Persian are kept exactly.
    text = "\U0001f469\u200d\U0001f4bb fixed it \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    assert Turn.model_validate({**GOOD, "text": text}).text == text


def test_ids_in_queries_and_commands_follow_the_same_rule() -> None:
    from compassmem.core.contracts.commands import ForgetCommand, RedactCommand

    fullwidth = "\uff43\uff11"  # "ｃ１", read as "c1"
    query = QueryRequest(question="why?", conversation_id=fullwidth)
    assert query.conversation_id == "c1"
    assert QueryRequest(question="why?", conversation_ids=[fullwidth]).conversation_ids == ["c1"]
    assert QueryRequest(question="why?", subject_id=fullwidth).subject_id == "c1"
    assert ForgetCommand(tenant="acme", conversation_id=fullwidth).conversation_id == "c1"
    redact = RedactCommand(tenant="acme", conversation_id=fullwidth, turn_id="\uff54\uff11")
    assert (redact.conversation_id, redact.turn_id) == ("c1", "t1")
    with pytest.raises(ValidationError, match="U\\+200B"):
        QueryRequest(question="why?", conversation_id="c\u200b1")
    assert check_id(fullwidth) == "c1"


def test_the_json_schema_states_the_rules() -> None:
    schema = Turn.model_json_schema()
    props = schema["properties"]
    for name in ("conversation_id", "turn_id", "subject_id", "session_id"):
        assert props[name]["pattern"] == ID_PATTERN
        assert (props[name]["minLength"], props[name]["maxLength"]) == (1, 128)
        assert "ASCII letter or digit" in props[name]["description"]
    assert "subject_id" not in schema["required"]
    assert "customer, user or account" in props["subject_id"]["description"]
    assert props["text"]["pattern"] == TEXT_PATTERN and props["text"]["maxLength"] == MAX_TEXT_BYTES
    assert props["speaker"]["maxLength"] == 100 and "pattern" in props["speaker"]
    assert props["timestamp"]["format"] == "date-time" and props["timestamp"]["type"] == "string"
    assert str(MAX_METADATA_DEPTH) in props["metadata"]["description"]
    assert props["attachments"]["maxItems"] == MAX_ATTACHMENTS
    caption = schema["$defs"]["Attachment"]["properties"]["caption"]
    assert caption["maxLength"] == MAX_CAPTION_CHARS and "pattern" in caption
    query = QueryRequest.model_json_schema()["properties"]
    assert query["question"]["maxLength"] == MAX_QUESTION_CHARS and query["conversation_id"]["pattern"] == ID_PATTERN


@pytest.mark.parametrize("value", ["c1", "D1:3", "...", " ", ".", "..", "a/b", "", "x" * 129, "a\u0000"])
def test_the_id_pattern_agrees_with_check_id_on_ascii(value: str) -> None:
    try:
        check_id(value)
        valid = True
    except ValueError:
        valid = False
    assert bool(re.search(ID_PATTERN, value)) == valid


# -- the same schema at the other two boundaries ------------------------------------------------------------


def test_the_turns_topic_decoder_dead_letters_a_nul_turn() -> None:
    def record(turn: dict[str, Any]) -> RawRecord:
        return RawRecord(topic="turns", partition=0, offset=1, key=b"acme/c1",
                         value=json.dumps(turn).encode("utf-8"))

    assert isinstance(decode_turns_record(record(GOOD)), TurnItem)
    # What producers, `compassmem produce` and POST /v1/turns write (encode_turn) comes back with its subject.
    key, value = encode_turn(Turn.model_validate({**GOOD, "subject_id": "cust-42"}))
    item = decode_turns_record(RawRecord(topic="turns", partition=0, offset=1, key=key, value=value))
    assert isinstance(item, TurnItem) and item.turn.subject_id == "cust-42"
    for bad in ({**GOOD, "text": "hello\u0000world"}, {**GOOD, "metadata": {"k": "\ud800"}},
                {**GOOD, "timestamp": 1700000000000}, {**GOOD, "turn_id": ".."}, {**GOOD, "subject_id": "a/b"}):
        letter = decode_turns_record(record(bad))
        assert isinstance(letter, DeadLetter) and letter.reason_code == DeadLetterReason.INVALID_FIELDS
        letter.model_dump_json()  # the dead letter itself can be produced


def test_the_jsonl_importer_names_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "turn_id": "t2", "speaker": "A\u0000"}) + "\n")
    with pytest.raises(ImportFormatError, match=r"line 2: field 'speaker'"):
        list(read_jsonl_turns(path))


# -- query cost ---------------------------------------------------------------------------------------------


def test_question_length_is_bounded() -> None:
    QueryRequest(conversation_id="c1", question="x" * MAX_QUESTION_CHARS)
    with pytest.raises(ValidationError, match=f"at most {MAX_QUESTION_CHARS} characters"):
        QueryRequest(conversation_id="c1", question="x" * (MAX_QUESTION_CHARS + 1))
    with pytest.raises(ValidationError, match="control characters"):
        QueryRequest(conversation_id="c1", question="why\u0000?")


def test_subgoals_are_capped() -> None:
    question = " and ".join(f"what did person{i} say about topic{i}" for i in range(40))
    analysis = analyse(question[:MAX_QUESTION_CHARS])
    assert len(analysis.subgoals) == MAX_SUBGOALS
    assert analysis.subgoals[0].text == question[:MAX_QUESTION_CHARS].strip()  # the whole question stays first
    more = with_subgoals(analysis, ["an extra subgoal from an LLM"])
    assert len(more.subgoals) == MAX_SUBGOALS
    few = analyse("Why did the launch slip and when did Atlas ship?")
    extra = with_subgoals(few, [f"llm subgoal {i}" for i in range(20)])
    assert len(extra.subgoals) == MAX_SUBGOALS and extra.subgoals[: len(few.subgoals)] == few.subgoals


# -- one id, one conversation: nothing a store trims, folds or draws alike --------------------------------------

# Each of these beside "a-trip" was once accepted as another conversation (issue: ids that differ by a space).
LOOKALIKES = ["a-trip ", " a-trip", "a-trip\t", "a-trip\u00a0", "a-trip\u3000", "a-trip\u2000", "a-trip\u034f",
              "a-trip\ufe0f", "a-trip\u17b4", "a-trip\u1160", "a-trip\u3164", "a-trip\uffa0", "a-trip\u2800",
              "a\u0323-trip", "\u0430-trip", "a-trip\u200b", "a-trip\u00ad"]


@pytest.mark.parametrize("field", ["conversation_id", "turn_id", "session_id", "subject_id"])
@pytest.mark.parametrize("lookalike", LOOKALIKES)
def test_an_id_that_looks_like_another_is_refused_naming_the_character(field: str, lookalike: str) -> None:
    [(where, message)] = errors_of(**{field: lookalike})
    assert where == field
    assert "control characters" in message or ("ASCII letters, digits" in message and "U+" in message), message


def test_the_id_rule_and_its_schema_pattern_agree() -> None:
    import re

    for value in ["a-trip", "D1:3", "auth0|5f7c", "...", *LOOKALIKES, ".", "..", "a/b", "", "x" * 129]:
        try:
            check_id(value)
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == bool(re.fullmatch(ID_PATTERN, value)), value


@pytest.mark.parametrize("spelling", ["Ann ", " Ann", "Ann\u00a0", "\u3000Ann", "\uff21nn", "Ann\u2000"])
def test_a_speaker_has_one_canonical_spelling(spelling: str) -> None:
    assert Turn.model_validate({**GOOD, "speaker": spelling}).speaker == "Ann"


def test_whitespace_inside_a_speaker_becomes_one_space() -> None:
    assert Turn.model_validate({**GOOD, "speaker": "Mary \u00a0 Ann"}).speaker == "Mary Ann"
    assert Turn.model_validate({**GOOD, "speaker": "Jos\u0065\u0301"}).speaker == "Jos\u00e9"  # NFD -> NFC form


@pytest.mark.parametrize("lookalike", ["Ann\u034f", "Ann\ufe0f", "Ann\u17b4", "Ann\u1160", "Ann\u3164", "Ann\uffa0",
                                       "Ann\u2800", "\u0323Ann", "\u0410nn", "\u0391nn"])
def test_a_speaker_that_looks_like_another_is_refused(lookalike: str) -> None:
    [(where, message)] = errors_of(speaker=lookalike)
    assert where == "speaker" and ("U+" in message or "scripts" in message), message


@pytest.mark.parametrize("name", ["Анна", "Ἀλέξανδρος", "Zoë", "李雷", "O'Brien-Smith"])
def test_names_in_one_script_are_kept(name: str) -> None:
    assert Turn.model_validate({**GOOD, "speaker": name}).speaker == name
