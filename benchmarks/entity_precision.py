"""Entity precision of the event frames: of the entities events list (``Event.entities``), how many name something.

The LoCoMo development conversations are built into events by the in-process pipeline. ``--draw N`` samples N
(event, entity) pairs at random and writes them as a label file to fill in by hand: the conversation, a turn of the
event whose text holds the entity, the entity and ``is_entity`` (true for a person, pet, place, organisation, work,
brand, event or group by name; false for a sentence opener, filler or ordinary word that is capitalised). Only ids
are written, no text of the data set (its licence keeps it out of the repository).

Without ``--draw`` the labels are scored against the events built now: an occurrence is still extracted when the
event holding its turn lists the entity. Precision is the share of names among the labelled occurrences still
extracted; kept names is the share of the labelled names still extracted (what a stricter rule costs).

    .venv/bin/python -m benchmarks.entity_precision --data PATH/locomo_dev.json [--labels FILE] [--draw 100]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from pydantic import BaseModel, TypeAdapter

from benchmarks.common import DEFAULT_DATA, REPO_ROOT, require_data
from benchmarks.memory_report import LatestRecords
from compassmem.core.config import Settings
from compassmem.core.models import Event
from compassmem.embedding.embedders import make_embedder
from compassmem.text.text_features import entities
from compassmem.write.importers import read_turns
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig

LABELS = REPO_ROOT / "benchmarks" / "entity_labels.json"


class EntityLabel(BaseModel):
    conversation_id: str
    turn_id: str
    entity: str
    is_entity: bool | None


Labels = TypeAdapter(list[EntityLabel])


def built_events(data: Path) -> dict[tuple[str, str], Event]:
    """The events the pipeline builds from the data (latest versions), by (conversation id, turn id) of each turn."""
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    written = LatestRecords()
    MemoryPipeline(make_embedder(settings), [written], PipelineConfig.from_settings(settings)).ingest(
        read_turns(data))
    return {(event.conversation_id, turn_id): event for event in written.events.values() for turn_id in event.turn_ids}


def draw(events: dict[tuple[str, str], Event], count: int, seed: int) -> list[EntityLabel]:
    distinct = {event.event_id: event for event in events.values()}.values()
    pairs = sorted(((event, entity) for event in distinct for entity in event.entities),
                   key=lambda pair: (pair[0].conversation_id, pair[0].event_id, pair[1]))
    chosen = random.Random(seed).sample(pairs, count)
    return [EntityLabel(conversation_id=event.conversation_id,
                        turn_id=next(o.turn_id for o in event.observations if entity in entities(o.text)),
                        entity=entity, is_entity=None)
            for event, entity in chosen]


def score(events: dict[tuple[str, str], Event], labels: list[EntityLabel]) -> dict[str, float | int]:
    labelled = [label for label in labels if label.is_entity is not None]
    extracted = [label for label in labelled if label.entity in events[(label.conversation_id, label.turn_id)].entities]
    names = [label for label in labelled if label.is_entity]
    correct = sum(1 for label in extracted if label.is_entity)
    return {"labelled": len(labelled), "names": len(names), "extracted": len(extracted), "correct": correct,
            "precision": round(correct / len(extracted), 3) if extracted else 0.0,
            "kept_names": round(correct / len(names), 3) if names else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--draw", type=int, metavar="N", help="write N unlabelled pairs to --labels instead")
    parser.add_argument("--seed", type=int, default=57)
    args = parser.parse_args()
    events = built_events(require_data(args.data))
    if args.draw:
        # One pair a line, to label by hand.
        lines = [json.dumps(label.model_dump()) for label in draw(events, args.draw, args.seed)]
        args.labels.write_text("[\n" + ",\n".join(lines) + "\n]\n")
        print(f"{args.draw} pairs to label written to {args.labels}")
        return
    result = score(events, Labels.validate_json(args.labels.read_text()))
    print(f"{result['labelled']} labelled occurrences ({result['names']} names): {result['extracted']} extracted "
          f"now, {result['correct']} of them names: precision {result['precision']:.1%}, names kept "
          f"{result['kept_names']:.1%}")


if __name__ == "__main__":
    main()
