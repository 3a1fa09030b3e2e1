"""The dialogue reading-comprehension corpora the shipped models are trained on, read into one shape: dialogues of
utterances, each with the questions asked about it and the utterances holding their answers. Also the int8 ONNX
file's last step shared by every trained model (the word-embedding table stored as float16).

training/README.md names each corpus's repository, commit and licence.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from compassmem.core.models import search_text

WORD = re.compile(r"[a-z0-9]+")
STOP = frozenset("""a an the and or but if of to in on at by for with from about as into is are was were be been being
do does did done have has had having i me my you your he him his she her it its we us our they them their this that
these those what which who whom whose when where why how there here not no yes so just than then too very can could
will would shall should may might must s t d ll m re ve n't dont""".split())


# --- the corpora ------------------------------------------------------------------------------------------------

@dataclass
class Utterance:
    speaker: str
    text: str


@dataclass
class Dialogue:
    source: str
    dialogue_id: str
    utterances: list[Utterance]
    # (question, indexes of the utterances that hold an answer; the first is the most often marked)
    questions: list[tuple[str, list[int]]] = field(default_factory=list)


_DETOKENIZE = [
    (re.compile(r" (n't|'s|'re|'m|'ve|'ll|'d)\b", re.I), r"\1"),
    (re.compile(r"\b(gon|wan|got) (na|ta)\b", re.I), r"\1\2"),
    (re.compile(r" ([.,!?;:%)\]}])"), r"\1"),
    (re.compile(r"([(\[{$]) "), r"\1"),
    (re.compile(r" ' (\w)"), r" '\1"),
    (re.compile(r"\s+"), " "),
]


def detokenize(text: str) -> str:
    """The corpora's tokenised text ("I do n't know .") as people type it ("I don't know.")."""
    for pattern, replacement in _DETOKENIZE:
        text = pattern.sub(replacement, text)
    return text.strip()


def first_names(speakers: list[str]) -> str:
    """FriendsQA's "Ross Geller" as a chat names its speaker, "Ross" (questions say "Ross" too)."""
    names = [s.split()[0] for s in speakers if s.strip()]
    return " and ".join(dict.fromkeys(names))


def read_friendsqa(path: Path) -> list[Dialogue]:
    """FriendsQA (emorynlp/FriendsQA, dat/friendsqa_*.json): scenes of Friends, questions whose answers are spans
    of an utterance or an utterance's speaker; every annotator's answer utterance counts as answering."""
    dialogues = []
    for scene in json.loads(path.read_text())["data"]:
        for number, paragraph in enumerate(scene["paragraphs"]):
            raw = paragraph.get("utterances:") or paragraph.get("utterances") or []
            index_of: dict[int, int] = {}
            utterances: list[Utterance] = []
            for item in raw:
                speakers = [s for s in item.get("speakers", []) if s and s != "#NOTE#"]
                text = detokenize(item.get("utterance", ""))
                if not speakers or not text:
                    continue
                index_of[int(item["uid"])] = len(utterances)
                utterances.append(Utterance(first_names(speakers), text))
            dialogue = Dialogue("friendsqa", f"{path.stem}:{scene['title']}:{number}", utterances)
            for qa in paragraph.get("qas", []):
                marked = collections.Counter(index_of[a["utterance_id"]] for a in qa.get("answers", [])
                                             if a.get("utterance_id") in index_of)
                if marked:
                    dialogue.questions.append((detokenize(qa["question"]), [i for i, _ in marked.most_common()]))
            if dialogue.questions:
                dialogues.append(dialogue)
    return dialogues


def read_molweni(path: Path) -> list[Dialogue]:
    """Molweni's MRC file (HIT-SCIR/Molweni, MRC(withDiscourse)/*.json): Ubuntu IRC chats; an answer is a character
    span of ``context``, the lower-cased "speaker: text" lines joined by spaces, mapped here back to its utterance.
    Unanswerable questions are left out."""
    dialogues = []
    for number, item in enumerate(json.loads(path.read_text())["data"]["dialogues"]):
        edus = item["edus"]
        context = item["context"]
        starts, position = [], 0
        for edu in edus:
            line = f"{edu['speaker']}: {edu['text']}".lower()
            found = context.find(line, position)
            starts.append(found if found >= 0 else position)
            position = (found if found >= 0 else position) + len(line)
        utterances = [Utterance(edu["speaker"], detokenize(edu["text"])) for edu in edus]
        dialogue = Dialogue("molweni", f"{path.stem}:{number}", utterances)
        for qa in item.get("qas", []):
            if qa.get("is_impossible") or not qa.get("answers"):
                continue
            marked = collections.Counter()
            asked = words(qa["question"])
            for answer in qa["answers"]:
                said_by = [i for i, e in enumerate(edus) if e["speaker"].lower() == answer["text"].strip().lower()]
                if said_by:
                    # A speaker's name: the offset is that of the name's first line, whichever line answers. The
                    # speaker's line sharing most words with the question answers; any of their lines is no
                    # negative.
                    best = max(said_by, key=lambda i: (len(asked & words(edus[i]["text"])), -i))
                    marked[best] += 2
                    marked.update({i: 1 for i in said_by if i != best})
                    continue
                start = int(answer["answer_start"])
                index = max(i for i, s in enumerate(starts) if s <= start) if start >= starts[0] else 0
                if answer["text"].lower() not in edus[index]["text"].lower() + edus[index]["speaker"].lower():
                    holders = [i for i, e in enumerate(edus) if answer["text"].lower() in e["text"].lower()]
                    if not holders:
                        continue
                    index = min(holders, key=lambda i: abs(starts[i] - start))
                marked[index] += 1
            if marked:
                dialogue.questions.append((detokenize(qa["question"]), [i for i, _ in marked.most_common()]))
        if dialogue.questions:
            dialogues.append(dialogue)
    return dialogues


def read_molweni_replies(path: Path) -> list[Dialogue]:
    """Molweni's discourse-parsing file (HIT-SCIR/Molweni, DP/*.json): the same kind of chats with discourse
    relations between utterances; a question-answer pair relation (QAP) makes the asking utterance a question whose
    answer is the replying one (every reply to the same question counts as answering it)."""
    dialogues = []
    for item in json.loads(path.read_text()):
        edus = item["edus"]
        utterances = [Utterance(edu["speaker"], detokenize(edu["text"])) for edu in edus]
        replies: dict[int, list[int]] = collections.defaultdict(list)
        for relation in item.get("relations", []):
            if relation.get("type") == "QAP" and relation["x"] != relation["y"]:
                replies[int(relation["x"])].append(int(relation["y"]))
        dialogue = Dialogue("molweni-replies", f"{path.stem}:{item.get('id')}", utterances)
        for asking, answering in replies.items():
            if utterances[asking].text and all(utterances[i].text for i in answering):
                dialogue.questions.append((utterances[asking].text, [*answering, asking]))
        if dialogue.questions:
            dialogues.append(dialogue)
    return dialogues


_IRC_MESSAGE = re.compile(r"^\[\d\d:\d\d\] <([^>]+)> (.*)$")
_ADDRESSEE = re.compile(r"^[\w\-\[\]`^|{}]+[:,] ")


_TRANSCRIPT_MARK = re.compile(r"\{\w+\}")
_SPELT = re.compile(r"\b((?:[A-Za-z]_)+)")


def _transcribed(text: str) -> str:
    """A meeting transcript's turn as people write it: the {vocalsound}/{disfmarker} marks gone and spelt letters
    ("T_V_s", "L_E_D_") joined."""
    text = " ".join(_TRANSCRIPT_MARK.sub("", text).split())
    return detokenize(_SPELT.sub(lambda found: found.group(1).replace("_", ""), text))


def read_qmsum(path: Path) -> list[Dialogue]:
    """A QMSum meeting (Yale-LILY/QMSum, data/ALL/{train,val,test}/*.json): a meeting transcript and queries whose
    answers are spans of it (``relevant_text_span``, inclusive turn indexes). The span's turns sharing most content
    words with the written answer come first; the whole span counts as answering (no span turn is a negative).
    A folder stands for its ``*.json`` files."""
    if path.is_dir():
        return [d for meeting in sorted(path.glob("*.json")) for d in read_qmsum(meeting)]
    meeting = json.loads(path.read_text())
    utterances = [Utterance(turn["speaker"], _transcribed(turn["content"])) for turn in meeting["meeting_transcripts"]]
    dialogue = Dialogue("qmsum", path.stem, utterances)
    for query in meeting.get("specific_query_list", []):
        span = sorted({i for start, end in query.get("relevant_text_span", [])
                       for i in range(int(start), min(int(end), len(utterances) - 1) + 1)})
        answer = words(query.get("answer", ""))
        # A turn of a few words ("Yeah.") answers nothing on its own even inside the span.
        ranked = sorted((i for i in span if len(words(utterances[i].text)) >= 4),
                        key=lambda i: (-len(answer & words(utterances[i].text)), i))
        if ranked and answer & words(utterances[ranked[0]].text):
            dialogue.questions.append((detokenize(query["query"]), ranked + [i for i in span if i not in ranked]))
    return [dialogue] if dialogue.questions else []


def read_irc_links(path: Path, *, min_distance: int = 2) -> list[Dialogue]:
    """An Ubuntu IRC disentanglement file (jkkummerfeld/irc-disentanglement, data/train/*.annotation.txt, beside
    its ``.ascii.txt``): reply links "earlier later -" (line numbers of the ``.ascii.txt``). The later message is the question and the earlier one it
    replies to the answer, for links at least ``min_distance`` messages apart (adjacent replies teach nothing a
    window does not) whose later message says something beyond an address (4 content words or more). The leading
    "nick:" address is cut from the question: a memory is asked about what was said, not who was pinged. A folder
    stands for its annotation files."""
    if path.is_dir():
        return [d for file in sorted(path.glob("*.annotation.txt")) for d in read_irc_links(file)]
    lines = path.with_name(path.name.replace(".annotation.txt", ".ascii.txt")).read_text(errors="replace").splitlines()
    position: dict[int, int] = {}
    utterances: list[Utterance] = []
    for number, line in enumerate(lines):
        found = _IRC_MESSAGE.match(line)
        if found and found.group(2).strip():
            position[number] = len(utterances)
            utterances.append(Utterance(found.group(1), found.group(2).strip()))
    dialogue = Dialogue("irc", path.name.split(".")[0] + ":" + path.name.split(".")[1], utterances)
    for row in path.read_text().splitlines():
        parts = row.split()
        if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        first, second = sorted((int(parts[0]), int(parts[1])))
        earlier, later = position.get(first), position.get(second)
        if later is None or earlier is None or later - earlier < min_distance:
            continue
        question = _ADDRESSEE.sub("", utterances[later].text)
        if len(words(question)) >= 4 and len(words(utterances[earlier].text)) >= 2:
            dialogue.questions.append((question, [earlier, later]))
    return [dialogue] if dialogue.questions else []


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--friendsqa", type=Path, action="append", default=[],
                        help="a FriendsQA file (dat/friendsqa_dev.json, dat/friendsqa_tst.json); repeatable")
    parser.add_argument("--molweni", type=Path, action="append", default=[],
                        help="a Molweni MRC file (MRC(withDiscourse)/test.json); repeatable")
    parser.add_argument("--molweni-replies", type=Path, action="append", default=[],
                        help="a Molweni discourse-parsing file (DP/dev.json, DP/test.json): question utterance -> "
                        "the utterances answering it; repeatable")
    parser.add_argument("--qmsum", type=Path, action="append", default=[],
                        help="a QMSum meeting file or folder (data/ALL/train/): query -> the turns of its span; "
                        "repeatable")
    parser.add_argument("--irc", type=Path, action="append", default=[],
                        help="an IRC disentanglement annotation file or folder (data/train/): later message -> "
                        "the earlier one it replies to; repeatable")
    parser.add_argument("--irc-links", type=int, default=3000,
                        help="use at most this many IRC reply links, drawn with the seed (the corpus has ~50k; "
                        "more would drown the question-style corpora)")


CORPUS_OPTIONS = ("friendsqa", "molweni", "molweni_replies", "qmsum", "irc")


def read_corpora(args: argparse.Namespace) -> list[Dialogue]:
    """Every corpus file the command line names, read; IRC links capped at ``--irc-links`` (drawn with
    ``--seed``)."""
    readers = {"friendsqa": read_friendsqa, "molweni": read_molweni, "molweni_replies": read_molweni_replies,
               "qmsum": read_qmsum}
    dialogues = [d for option, read in readers.items() for path in getattr(args, option) for d in read(path)]
    irc = [d for path in args.irc for d in read_irc_links(path)]
    links = [(n, q) for n, d in enumerate(irc) for q in range(len(d.questions))]
    kept = set(random.Random(args.seed).sample(links, min(args.irc_links, len(links))))
    for n, dialogue in enumerate(irc):
        dialogue.questions = [q for i, q in enumerate(dialogue.questions) if (n, i) in kept]
    return dialogues + [d for d in irc if d.questions]


def corpus_files(args: argparse.Namespace) -> dict[str, list[str]]:
    """The corpus files a run read, by option, for its ``training_run.json``."""
    return {option: [str(p) for p in getattr(args, option)] for option in CORPUS_OPTIONS if getattr(args, option)}


def require_a_corpus(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not any(getattr(args, option) for option in CORPUS_OPTIONS):
        parser.error("name at least one corpus file (" + ", ".join("--" + o.replace("_", "-")
                                                                    for o in CORPUS_OPTIONS) + ")")


# --- documents --------------------------------------------------------------------------------------------------

FIRST_DAY = datetime(2019, 1, 1, 12)


def dated_questions(dialogues: list[Dialogue], rng: random.Random
                    ) -> Iterator[tuple[Dialogue, datetime, str, list[int], list[int]]]:
    """Each question with its dialogue, the dialogue's made-up day (drawn from ``rng`` as the dialogue starts), the
    utterances answering it and the others."""
    for dialogue in dialogues:
        day = FIRST_DAY + timedelta(days=rng.randrange(6 * 365))
        for question, answers in dialogue.questions:
            yield dialogue, day, question, answers, [i for i in range(len(dialogue.utterances)) if i not in answers]


def batches(count: int, size: int, steps: int, rng: random.Random) -> Iterator[list[int]]:
    """``steps`` batches of ``size`` indexes below ``count``: passes in an order ``rng`` shuffles, a batch running
    on into the next pass."""
    order: list[int] = []
    for _ in range(steps):
        if len(order) < size:
            fresh = list(range(count))
            rng.shuffle(fresh)
            order.extend(fresh)
        yield order[:size]
        del order[:size]


def optimise(loss, model, optimizer, schedule) -> float:  # noqa: ANN001 - torch objects, imported lazily
    """One optimiser step on ``loss`` (gradient norm clipped at 1); the loss as a number."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
    return float(loss.detach())


def report_step(step: int, steps: int, losses: list[float], started: float) -> None:
    if (step + 1) % 25 == 0 or step + 1 == steps:
        recent = losses[-25:]
        print(f"  step {step + 1}/{steps}  loss {sum(recent) / len(recent):.4f}  "
              f"{time.perf_counter() - started:.0f} s", flush=True)


def tool_versions(packages: tuple[str, ...]) -> dict[str, str]:
    import importlib.metadata

    found = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "none"
    return found


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def document(utterance: Utterance, day: datetime, form: str, rng: random.Random) -> str:
    """A turn as compassmem embeds it for indexing ("search"), its bare text ("plain"), or either at random."""
    if form == "mixed":
        form = rng.choice(["search", "plain"])
    return search_text(utterance.speaker, utterance.text, day) if form == "search" else utterance.text


# --- export -----------------------------------------------------------------------------------------------------

def _word_table(model):  # noqa: ANN001, ANN202 - onnx.ModelProto in, (name, initializer, lookups) out
    """The word-embedding table of an exported model (the largest float32 initializer a Gather reads: the int8
    quantiser leaves Gather alone) and the Gather nodes that read it; None when there is none."""
    import numpy as np
    import onnx

    initializers = {i.name: i for i in model.graph.initializer}
    gathers = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0] in initializers
               and initializers[n.input[0]].data_type == onnx.TensorProto.FLOAT]
    if not gathers:
        return None
    name = max((n.input[0] for n in gathers), key=lambda table: np.prod(initializers[table].dims))
    return name, initializers[name], [n for n in gathers if n.input[0] == name]


def float16_word_embeddings(path: Path) -> int:
    """Store the word-embedding table as float16 and cast the looked-up rows back to float32. Returns the bytes
    saved."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    found = _word_table(model)
    if found is None:
        return 0
    table_name, table, lookups = found
    before = len(table.raw_data) or 4 * int(np.prod(table.dims))
    half = numpy_helper.from_array(numpy_helper.to_array(table).astype(np.float16), table_name)
    table.CopyFrom(half)
    for node in lookups:
        rows = node.output[0]
        node.output[0] = f"{rows}_float16"
        position = list(model.graph.node).index(node)
        model.graph.node.insert(position + 1, helper.make_node(
            "Cast", [node.output[0]], [rows], to=onnx.TensorProto.FLOAT, name=f"{node.name or table_name}_to_float32"))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return before - len(half.raw_data)


def int8_word_embeddings(path: Path) -> int:
    """Store the word-embedding table as int8 with one float32 scale per row (symmetric, the row's largest
    magnitude over 127): the looked-up rows are cast back to float32 and multiplied by their rows' scales. A
    quarter of the float32 table. Returns the bytes saved."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    found = _word_table(model)
    if found is None:
        return 0
    table_name, table, lookups = found
    values = numpy_helper.to_array(table)
    scales = np.maximum(np.abs(values).max(axis=1), 1e-12) / 127.0
    quantised = np.clip(np.round(values / scales[:, None]), -127, 127).astype(np.int8)
    before = values.nbytes
    table.CopyFrom(numpy_helper.from_array(quantised, table_name))
    scale_name = f"{table_name}_row_scale"
    model.graph.initializer.append(numpy_helper.from_array(scales.astype(np.float32)[:, None], scale_name))
    for node in lookups:
        rows, ids = node.output[0], node.input[1]
        node.output[0] = f"{rows}_int8"
        position = list(model.graph.node).index(node)
        model.graph.node.insert(position + 1, helper.make_node(
            "Cast", [node.output[0]], [f"{rows}_unscaled"], to=onnx.TensorProto.FLOAT, name=f"{rows}_cast"))
        model.graph.node.insert(position + 2, helper.make_node(
            "Gather", [scale_name, ids], [f"{rows}_scale"], axis=0, name=f"{rows}_scale_lookup"))
        model.graph.node.insert(position + 3, helper.make_node(
            "Mul", [f"{rows}_unscaled", f"{rows}_scale"], [rows], name=f"{rows}_rescale"))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return before - quantised.nbytes - 4 * len(scales)
