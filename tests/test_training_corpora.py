"""The training corpora readers (training/dialogue_corpora.py) on small files written in each corpus's own layout:
what becomes a question, what answers it, and what is left out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from training.dialogue_corpora import read_corpora, read_irc_links, read_qmsum

MEETING = {
    "topic_list": [],
    "general_query_list": [{"query": "Summarize the meeting", "answer": "They chose a battery."}],
    "specific_query_list": [
        {"query": "What did Marketing say about the battery?",
         "answer": "Marketing said a rechargeable battery costs more but lasts for years.",
         "relevant_text_span": [["1", "3"]]},
        # Nothing in its span shares a word with the answer: no pair rather than a wrong one.
        {"query": "What did the group decide about colours?", "answer": "Yellow and grey.",
         "relevant_text_span": [["0", "0"]]},
    ],
    "meeting_transcripts": [
        {"speaker": "Project Manager", "content": "Okay , let 's start {vocalsound} ."},
        {"speaker": "Marketing", "content": "Yeah ."},
        {"speaker": "Marketing", "content": "A rechargeable battery costs more , but it lasts for years ."},
        {"speaker": "Industrial Designer", "content": "We could use a kinetic battery in the L_C_D_ remote ."},
        {"speaker": "Project Manager", "content": "The battery budget is twelve Euros per unit overall ."},
    ],
}


def test_a_qmsum_query_is_answered_by_its_span_the_turns_sharing_the_answer_first(tmp_path: Path) -> None:
    (tmp_path / "ES2000a.json").write_text(json.dumps(MEETING))
    [dialogue] = read_qmsum(tmp_path)
    assert dialogue.source == "qmsum"
    assert [u.text for u in dialogue.utterances[2:4]] == [
        "A rechargeable battery costs more, but it lasts for years.", "We could use a kinetic battery in the LCD remote."]
    assert dialogue.utterances[0].text == "Okay, let's start."
    [(question, answers)] = dialogue.questions
    assert question == "What did Marketing say about the battery?"
    # The turn repeating the answer first, then the span's other turns (the short "Yeah." last): none of them is a
    # negative; the turn outside the span (4) is.
    assert answers == [2, 3, 1]


IRC_LINES = [
    "=== alice [~a@host]  has joined #ubuntu",
    "[10:00] <alice> how do I mount an ntfs partition on boot with fstab?",
    "[10:01] <bob> anyone seen the new kernel?",
    "[10:01] <carol> bob: yes",
    "[10:02] <dave> alice: add a line to /etc/fstab with the ntfs-3g type and your mount point",
    "[10:03] <bob> carol: thanks",
]
# "earlier later -": line numbers of the .ascii.txt; a self link starts a conversation.
IRC_LINKS = ["1 1 -", "2 2 -", "2 3 -", "1 4 -", "3 5 -"]


def test_an_irc_reply_link_asks_with_the_later_message_for_the_earlier_one(tmp_path: Path) -> None:
    (tmp_path / "2005-01-01.train-c.ascii.txt").write_text("\n".join(IRC_LINES) + "\n")
    (tmp_path / "2005-01-01.train-c.annotation.txt").write_text("\n".join(IRC_LINKS) + "\n")
    [dialogue] = read_irc_links(tmp_path)
    assert [u.speaker for u in dialogue.utterances] == ["alice", "bob", "carol", "dave", "bob"]
    # Only dave's reply is 2 or more messages after what it answers and says something beyond an address;
    # the address "alice:" is cut from the question.
    assert dialogue.questions == [
        ("add a line to /etc/fstab with the ntfs-3g type and your mount point", [0, 3])]


def test_irc_links_are_capped_and_the_draw_follows_the_seed(tmp_path: Path) -> None:
    lines = [f"[10:{i:02d}] <user{i % 3}> message number {i} about partitions mounting drives and kernels"
             for i in range(40)]
    (tmp_path / "d.train-c.ascii.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "d.train-c.annotation.txt").write_text("\n".join(f"{i} {i + 3} -" for i in range(37)) + "\n")
    options = {"friendsqa": [], "molweni": [], "molweni_replies": [], "qmsum": [], "irc": [tmp_path]}

    def read(seed: int) -> list[str]:
        [dialogue] = read_corpora(argparse.Namespace(**options, irc_links=10, seed=seed))
        return [question for question, _ in dialogue.questions]

    assert len(read(13)) == 10
    assert read(13) == read(13)
    assert read(13) != read(14)
