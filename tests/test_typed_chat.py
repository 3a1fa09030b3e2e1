"""The typed-chat rewrite of a LoCoMo-layout file (benchmarks/typed_chat.py): bursts of lower-case messages, gold
turns mapped to the messages that hold the answer, and a file every reader of the layout still reads."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.typed_chat import main, messages_of
from compassmem.evaluation.baselines import load_turn_corpus
from compassmem.evaluation.locomo_questions import load_locomo_questions

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hey Bo! Good to see you."},
            {"speaker": "Bo", "dia_id": "D1:2",
             "text": "Hi Ann! Guess what. I went hiking in Zion with my sister last weekend. The views were amazing.",
             "blip_caption": "a photo of a canyon"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Wow, that sounds great."},
        ],
    },
    "qa": [
        {"question": "Where did Bo go hiking?", "answer": "Zion", "evidence": ["D1:2"], "category": 4},
        {"question": "Does Bo like nature?", "answer": "Likely yes", "evidence": ["D1:2"], "category": 3},
    ],
}


def test_a_turn_becomes_a_burst_of_typed_messages() -> None:
    assert messages_of("Hi Ann! Guess what. I went hiking in Zion with my sister last weekend. The views were "
                       "amazing.") == ["hi ann! guess what", "i went hiking in zion with my sister last weekend",
                                       "the views were amazing"]
    assert messages_of("Ok.") == ["ok"]
    assert messages_of("  ") == []


def test_evidence_is_the_message_holding_the_answer_else_the_whole_burst(tmp_path: Path) -> None:
    source, out = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    assert main(["--data", str(source), "--out", str(out)]) == 0
    session = json.loads(out.read_text(encoding="utf-8"))[0]["conversation"]["session_1"]
    assert [(t["dia_id"], t["speaker"]) for t in session] == [
        ("D1:1", "Ann"), ("D1:2", "Bo"), ("D1:3", "Bo"), ("D1:4", "Bo"), ("D1:5", "Ann")]
    assert not any("blip_caption" in turn for turn in session)
    questions, report = load_locomo_questions(out)
    assert report.questions_kept == 2
    by_question = {q.question: q.evidence for q in questions}
    assert by_question["Where did Bo go hiking?"] == ["D1:3"]
    assert by_question["Does Bo like nature?"] == ["D1:2", "D1:3", "D1:4"]
    assert len(load_turn_corpus(out)) == 5


def test_captions_stay_on_the_last_message_when_asked(tmp_path: Path) -> None:
    source, out = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    main(["--data", str(source), "--out", str(out), "--keep-captions"])
    session = json.loads(out.read_text(encoding="utf-8"))[0]["conversation"]["session_1"]
    assert [t.get("blip_caption") for t in session] == [None, None, None, "a photo of a canyon", None]
