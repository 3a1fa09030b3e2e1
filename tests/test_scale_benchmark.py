"""The scale benchmark's data plumbing, without the LoCoMo file: copies map to their base vectors, conversations
are dealt to subjects as promised, blocks are reported per 1,000 turns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from benchmarks.scale import (
    LONG_CONVERSATION,
    CachedEmbedder,
    interleaved,
    long_conversation,
    many_conversations,
    parse_args,
    per_block,
    subject_of,
)
from compassmem.core.models import Turn


def base_turns(conversations: int = 2, turns: int = 65) -> list[Turn]:
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    return [Turn(conversation_id=f"conv-{c}", turn_id=f"D1:{i + 1}", speaker=("Ann", "Bob")[i % 2],
                 text=f"turn {i} of {c}", timestamp=start + timedelta(minutes=i), session_id="1")
            for c in range(conversations) for i in range(turns)]


def test_copies_embed_as_their_base_turn() -> None:
    base = base_turns()
    vectors = np.eye(len(base), dtype=np.float32)
    embedder = CachedEmbedder(vectors, len(base))
    long = long_conversation(base, 300, embedder)
    assert len(long) == 300 and {t.conversation_id for t in long} == {LONG_CONVERSATION}
    assert len({t.turn_id for t in long}) == 300
    got = embedder.embed([t.search_text() for t in long])
    assert np.array_equal(got, vectors[[i % len(base) for i in range(300)]])
    with pytest.raises(KeyError):
        embedder.embed([base[0].model_copy(update={"speaker": "Someone else"}).search_text()])


def test_subjects_and_interleaving() -> None:
    base = base_turns()
    embedder = CachedEmbedder(np.zeros((len(base), 4), dtype=np.float32), 4)
    many = many_conversations(base, conversations=20, subjects=5, big=8, embedder=embedder)
    assert all(len(turns) == 30 for turns in many.values())
    subjects = [turns[0].subject_id for turns in many.values()]
    assert subjects.count("subject-0000") == 8 and len(set(subjects)) == 5
    assert [subject_of(i, 20, 5, 8) for i in (7, 8, 9, 12)] == ["subject-0000", "subject-0001", "subject-0002",
                                                                 "subject-0001"]
    ordered = interleaved(many, active=4)
    assert len(ordered) == 600 and [t.conversation_id for t in ordered[:5]] == [
        "scale-c00000", "scale-c00001", "scale-c00002", "scale-c00003", "scale-c00000"]
    embedder.embed([t.search_text() for t in ordered])


def test_blocks_and_quick_sizes() -> None:
    blocks = per_block([(25, 0.025)] * 80, 1000)
    assert [b["turns"] for b in blocks] == [1000, 1000] and blocks[0]["median_ms"] == pytest.approx(1.0)
    args = parse_args(["--quick", "--turns", "500"])
    assert (args.turns, args.conversations, args.subjects, args.queries) == (500, 200, 40, 30)
    assert parse_args(["--conversations", "10", "--subjects", "4"]).subject_conversations == 7


def test_reuse_runs_on_kept_stores_only(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--reuse", str(tmp_path)])  # nothing was kept there
    (tmp_path / "stores").mkdir()
    args = parse_args(["--reuse", str(tmp_path), "--queries", "5"])
    assert args.reuse == tmp_path and args.out.name == "scale_queries.json"  # the whole run's JSON stays
    assert parse_args([]).out.name == "scale.json"
    with pytest.raises(SystemExit):
        parse_args(["--reuse", str(tmp_path), "--keep", str(tmp_path / "other")])
