"""Reading conversation files: LoCoMo JSON, the JSONL turn format, and clear errors for bad input."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from compassmem.write.importers import ImportFormatError, read_turns
from compassmem.core.models import Turn

GOOD = {"conversation_id": "c1", "turn_id": "D1:1", "speaker": "Ann", "text": "Hi there",
        "timestamp": "2023-05-08T13:56:00+00:00", "session_id": "1"}


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_jsonl_round_trip(tmp_path: Path) -> None:
    second = {**GOOD, "turn_id": "D1:2", "attachments": [{"kind": "image", "caption": "a red kite"}]}
    turns = list(read_turns(write_jsonl(tmp_path / "t.jsonl", [GOOD, "", second])))
    assert [t.turn_id for t in turns] == ["D1:1", "D1:2"]
    assert turns[1].indexed_text() == "Hi there [shares a red kite]"


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("{not json", "line 2: not valid JSON"),
        ({**GOOD, "timestamp": "2023-05-08T13:56:00"}, "line 2: field 'timestamp'"),
        ({k: v for k, v in GOOD.items() if k != "speaker"}, "line 2: field 'speaker': Field required"),
        ({**GOOD, "text": "   "}, "line 2: field 'text'"),
        ({**GOOD, "text": "x" * 17000}, "16 KiB"),
        ({**GOOD, "tenant": "Bad Tenant"}, "line 2: field 'tenant'"),
        ({**GOOD, "conversation_id": "a/b"}, "line 2: field 'conversation_id'"),
        ({**GOOD, "speaker": 5}, "line 2: field 'speaker'"),
        ([1, 2], "line 2: expected a JSON object"),
    ],
)
def test_malformed_jsonl_names_the_line_and_field(tmp_path: Path, bad: object, expected: str) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, bad])
    with pytest.raises(ImportFormatError, match=expected.replace("(", r"\(")):
        list(read_turns(path))


def test_a_turn_id_given_again_is_skipped_for_the_same_turn_and_refused_for_another(tmp_path: Path) -> None:
    """One turn id, one turn of its conversation (compassmem/write/turn_ids.py): the same line again changes nothing,
    another turn under the id is refused at its line, naming the first; the same id in another conversation is
    another turn."""
    elsewhere = {**GOOD, "conversation_id": "c2", "text": "Hi from elsewhere"}
    path = write_jsonl(tmp_path / "twice.jsonl", [GOOD, {**GOOD, "turn_id": "D1:2"}, GOOD, elsewhere])
    assert [(t.conversation_id, t.turn_id) for t in read_turns(path)] == [("c1", "D1:1"), ("c1", "D1:2"),
                                                                          ("c2", "D1:1")]
    path = write_jsonl(tmp_path / "other.jsonl", [GOOD, {**GOOD, "turn_id": "D1:2"}, {**GOOD, "text": "Bye"}])
    with pytest.raises(ImportFormatError, match="other.jsonl: line 3: turn 'D1:1' of conversation 'c1': line 1 has "
                                                "another turn under this id"):
        list(read_turns(path))
    sample = locomo_sample()
    sample["conversation"]["session_2"].append({"speaker": "Bob", "dia_id": "D1:2", "text": "Not the photo."})
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([sample]))
    with pytest.raises(ImportFormatError, match="locomo.json: turn 4: turn 'D1:2' of conversation 'conv-x': turn 2 "
                                                "has another turn"):
        list(read_turns(locomo))


def locomo_sample(sample_id: str = "conv-x") -> dict:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I went hiking yesterday."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Look!", "blip_caption": "a photo of a dog",
                 "img_url": ["http://example.invalid/dog.jpg"]},
            ],
            "session_2_date_time": "9:00 am on 10 June, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Back again."}],
            "session_3_date_time": "9:00 am on 11 June, 2023",
        },
        "qa": [{"question": "never read", "evidence": ["D1:1"], "category": 1}],
        "observation": "never read",
    }


def test_locomo_turns_get_session_times_in_order(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([locomo_sample()]))
    turns: list[Turn] = list(read_turns(path))
    assert [t.turn_id for t in turns] == ["D1:1", "D1:2", "D2:1"]
    assert turns[0].timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert (turns[1].timestamp - turns[0].timestamp).total_seconds() == 1
    assert turns[1].attachments[0].caption == "a photo of a dog"
    assert turns[2].session_id == "2" and turns[0].conversation_id == "conv-x"


def test_locomo_bad_session_date_names_the_session(tmp_path: Path) -> None:
    sample = locomo_sample()
    sample["conversation"]["session_2_date_time"] = "sometime in June"
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    with pytest.raises(ImportFormatError, match="session_2: unrecognised session date_time"):
        list(read_turns(path))


def test_locomo_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"sample_id": "x",\n  oops\n]')
    with pytest.raises(ImportFormatError, match="line 3"):
        list(read_turns(path))


# -- subject_id: the customer, user or account the conversation is about -------------------------------------


def test_jsonl_lines_carry_an_optional_subject_id(tmp_path: Path) -> None:
    lines = [{**GOOD, "subject_id": "cust-42"}, {**GOOD, "turn_id": "D1:2"}]
    turns = list(read_turns(write_jsonl(tmp_path / "t.jsonl", lines)))
    assert [t.subject_id for t in turns] == ["cust-42", None]


def test_a_bad_subject_id_in_jsonl_names_the_line_and_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, {**GOOD, "turn_id": "D1:2", "subject_id": "cust/42"}])
    with pytest.raises(ImportFormatError, match=r"line 2: field 'subject_id': .*'/'"):
        list(read_turns(path))


def test_locomo_import_stamps_the_subject_on_every_turn(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([locomo_sample("conv-x"), locomo_sample("conv-y")]))
    assert {t.subject_id for t in read_turns(path)} == {None}
    turns = list(read_turns(path, subject_id="acct-0017"))
    assert len(turns) == 6 and {t.subject_id for t in turns} == {"acct-0017"}
    assert {t.conversation_id for t in turns} == {"conv-x", "conv-y"}


@pytest.mark.parametrize("bad", ["", " ", "..", "a/b", "x" * 129, "a\u0000"])
def test_locomo_import_refuses_a_bad_subject_before_reading(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([locomo_sample()]))
    with pytest.raises(ImportFormatError, match="subject id"):
        list(read_turns(path, subject_id=bad))


def test_a_subject_for_a_jsonl_file_is_refused_not_ignored(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [GOOD])
    with pytest.raises(ImportFormatError, match="each line carries its own optional 'subject_id'"):
        list(read_turns(path, subject_id="cust-42"))


def test_ingest_and_produce_take_a_subject_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compassmem.cli.main import build_parser
    from compassmem.core.config import Settings

    parser = build_parser()
    assert parser.parse_args(["ingest", "x.json", "--subject", "cust-42"]).subject == "cust-42"
    assert parser.parse_args(["ingest", "x.json"]).subject is None
    # The option reaches the importer: a bad subject fails the command before anything is loaded or written.
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([locomo_sample()]))
    settings = Settings(data_dir=tmp_path / "data")
    for command in ("ingest", "produce"):
        args = parser.parse_args([command, str(path), "--subject", "a/b"])
        assert args.handler(args, settings) == 2
        assert "subject id 'a/b': must hold only ASCII letters" in capsys.readouterr().err
