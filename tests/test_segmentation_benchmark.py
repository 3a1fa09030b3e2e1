"""The event-boundary benchmark and its data recipes: task dialogues joined from single-task ones with a gold boundary
at each join, BEAM sessions with a gold boundary at each request, and every data set in one table."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from benchmarks import beam_requests, segmentation, task_dialogues

DOMAINS = ("Restaurants_1", "Flights_2", "Hotels_3", "Music_1")


def sgd_dialogue(number: int, service: str, turns: int) -> dict[str, object]:
    speakers = ["USER", "SYSTEM"] * (turns // 2)
    return {"dialogue_id": f"{service}-{number}", "services": [service],
            "turns": [{"speaker": s, "utterance": f"{service} {number} turn {i}"} for i, s in enumerate(speakers)]}


def write_sgd(root: Path) -> None:
    """Twelve single-service dialogues per split, of four domains and 4 to 8 turns, and one with two services."""
    for split in task_dialogues.SPLITS:
        folder = root / split
        folder.mkdir(parents=True)
        dialogues = [sgd_dialogue(n, DOMAINS[n % 4], 4 + 2 * (n % 3)) for n in range(12)]
        two = sgd_dialogue(99, "Restaurants_1", 6)
        two["services"] = ["Restaurants_1", "Hotels_3"]
        (folder / "dialogues_001.json").write_text(json.dumps([*dialogues, two]))
        (folder / "schema.json").write_text("[]")


def test_task_dialogues_are_joined_whole_with_a_gold_boundary_at_each_join(tmp_path: Path) -> None:
    write_sgd(tmp_path / "sgd")
    out = tmp_path / "joined.json"
    assert task_dialogues.main(["--sgd", str(tmp_path / "sgd"), "--out", str(out), "--per-split", "2", "2", "2",
                                "--min-tasks", "3", "--max-tasks", "4"]) == 0
    joined = json.loads(out.read_text())
    assert sorted({d["set"] for d in joined}) == ["dev", "test", "train"]
    for dialogue in joined:
        sources = [source.rsplit("-", 1) for source in dialogue["sources"]]
        assert 3 <= len(sources) <= 4 and "99" not in [n for _, n in sources]  # single-service dialogues only
        assert all(a[0] != b[0] for a, b in pairwise(sources))  # adjacent domains differ
        # Each segment is one whole source dialogue: its size, and its utterances in order.
        at = 0
        for (service, number), size in zip(sources, dialogue["segments"], strict=True):
            assert dialogue["utterances"][at:at + size] == [f"{service} {number} turn {i}" for i in range(size)]
            at += size
        assert at == len(dialogue["utterances"])
    for split in task_dialogues.SPLITS:  # every source dialogue of a split used once
        used = [source for d in joined if d["set"] == split for source in d["sources"]]
        assert len(used) == len(set(used))


def write_beam_chat(folder: Path) -> None:
    folder.mkdir(parents=True)
    batches = [{"batch_number": 1, "turns": [
        [{"role": "user", "id": 0, "time_anchor": "January-05-2024", "content": "Help me set up Redis? ->-> 1,3"},
         {"role": "assistant", "id": 1, "content": "Install it first. " + "Then configure it. " * 1500},
         {"role": "user", "id": 2, "content": "hmm, and on Windows?"},
         {"role": "assistant", "id": 3, "content": "Use WSL."}],
        [{"role": "user", "id": 4, "content": "Now explain JWT expiry."},
         {"role": "assistant", "id": 5, "content": "Set the exp claim."}]]}]
    (folder / "chat.json").write_text(json.dumps(batches))


def test_beam_sessions_get_a_gold_boundary_at_each_request(tmp_path: Path) -> None:
    chats = tmp_path / "chats" / "500K"
    write_beam_chat(chats / "1")
    write_beam_chat(chats / "20")
    out = tmp_path / "beam.json"
    assert beam_requests.main(["--beam", str(chats), "--out", str(out)]) == 0
    first, second = json.loads(out.read_text())
    assert (first["dial_id"], first["set"], second["set"]) == ("beam-1-1", "train", "dev")
    assert first["segments"] == [4, 2]
    assert first["speakers"] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert first["utterances"][0] == "Help me set up Redis?"  # the generator's marker dropped
    assert len(first["utterances"][1].encode()) <= 16 * 1024  # cut to the turn limit


def test_beam_held_out_chats_are_refused(tmp_path: Path) -> None:
    held_out = tmp_path / "chats" / "100K"
    write_beam_chat(held_out / "1")
    with pytest.raises(SystemExit):
        beam_requests.main(["--beam", str(held_out), "--out", str(tmp_path / "out.json")])


def test_every_data_set_is_reported_in_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"dial_id": "c1", "set": "dev", "segments": [3, 3], "utterances": [
        "hey ! do you love cats ?", "i am a dog person , i have two", "dogs are great , what breed ?",
        "by the way , did you watch the game last night ?", "yes ! what a finish", "the last goal was amazing"]}]))
    service = tmp_path / "service.json"
    service.write_text(json.dumps([{"dial_id": "s1", "set": "dev", "segments": [4, 2],
                                    "speakers": ["user", "assistant", "user", "assistant", "user", "assistant"],
                                    "utterances": ["How do I read a CSV file in Python?", "Use the csv module.",
                                                   "hmm, and with a header row?", "Use csv.DictReader.",
                                                   "Different topic: plan me a 3-day trip to Rome.",
                                                   "Day 1: the Colosseum and the Forum."]}]))
    out = tmp_path / "results.json"
    assert segmentation.main(["--data", str(chat), str(service), "--no-vector-cache", "--no-plain-baseline",
                              "--random-draws", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [(s["data"], s["split"]) for s in report["sets"]] == [("chat", "dev"), ("service", "dev")]
    for entry in report["sets"]:
        assert {"compassmem detector", "texttiling (search-text embeddings)", "no cuts"} <= set(entry["methods"])
        assert entry["methods"]["no cuts"]["cuts_per_dialogue"] == 0
    assert report["sets"][1]["methods"]["no cuts"]["segments_per_gold"] == 0.5
    table = capsys.readouterr().out
    assert "chat dev" in table and "service dev" in table
