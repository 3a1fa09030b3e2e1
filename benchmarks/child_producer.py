"""The producer of ``benchmarks.stream_throughput``'s end-to-end rounds, in a process of its own.

A deployment's producers are other processes. One inside the worker's process shares its GIL with the worker's
event loop and store thread, and the end-to-end rate then measures the benchmark's producer as well. The child
reads the turns and connects first, writes ``ready``, and produces when it reads a line on stdin, so the timed span
holds neither Python's start-up nor the file's parsing; it ends by writing what it produced as one JSON line.

    python -m benchmarks.child_producer BOOTSTRAP TOPIC DATA TENANT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.publish.producer import TurnProducer

READY = "ready"


def main() -> None:
    bootstrap, topic, data, tenant = sys.argv[1:5]
    configure_logging("WARNING")
    # Retagged as the parent retags its round (a JSONL line would keep its own tenant through read_turns).
    turns = [turn.model_copy(update={"tenant": tenant}) for turn in read_turns(Path(data))]
    with TurnProducer(bootstrap, topic) as producer:
        print(READY, flush=True)
        sys.stdin.readline()
        produced = producer.produce(turns)
    print(json.dumps({"turns": len(turns), "seconds": produced.seconds}), flush=True)


if __name__ == "__main__":
    main()
