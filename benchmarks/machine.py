"""What machine a benchmark ran on, written beside its figures: the speed goals are absolute, and the machines the
benchmarks run on differ by a factor of two and more.

Two things decide most of compassmem's timings: how fast the CPU runs plain Python (segmentation, relations, the
walk, the stores' client code) and which vector instructions it has for the int8 embedder (the query API embedded a
question in 3.4 ms at the median on a machine with AVX-512 VNNI, and in 6.3 ms on one with AVX2 only whose plain
Python ran as fast). So next to the CPU's name and count, a result records its vector extensions and the time of a
fixed pure-Python loop, measured when the results are written: two runs whose loop times differ by a third ran on
machines (or under loads) that differ as much. The load average when the benchmark started says whether something
else had been running.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from pydantic import BaseModel, Field

CPUINFO = Path("/proc/cpuinfo")
# The extensions that change the embedder's speed, in the order they are reported.
VECTOR_EXTENSIONS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
LOOP_ADDITIONS = 5_000_000


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not available on this platform
        return None


# Taken when a benchmark imports this module, before it loads the machine itself.
LOAD_AT_START = _load_average()


class MachineFacts(BaseModel):
    cpu_model: str
    logical_cpus: int
    vector_extensions: list[str] = Field(description="of VECTOR_EXTENSIONS, those the CPU has")
    python_loop_s: float = Field(description=f"seconds for {LOOP_ADDITIONS:,} additions in a pure-Python loop")
    load_average_1m: float | None = Field(description="the 1-minute load average when the benchmark started")
    python: str

    def line(self) -> str:
        extensions = ", ".join(self.vector_extensions) or "no AVX2"
        load = (f"load {self.load_average_1m:.2f} at start" if self.load_average_1m is not None
                else "load unknown")
        return (f"machine: {self.cpu_model}, {self.logical_cpus} CPUs ({extensions}); Python loop of "
                f"{LOOP_ADDITIONS:,} additions {self.python_loop_s:.2f} s; {load}; Python {self.python}")


def cpu_description(cpuinfo: str) -> tuple[str, list[str]]:
    """The CPU's model name and which of VECTOR_EXTENSIONS its flags list, from /proc/cpuinfo's text."""
    model = ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name == "flags" and not flags:
            flags = set(value.split())
    return model, [extension for extension in VECTOR_EXTENSIONS if extension in flags]


def python_loop_seconds(additions: int = LOOP_ADDITIONS) -> float:
    started = time.perf_counter()
    total = 0
    for number in range(additions):
        total += number
    return time.perf_counter() - started


def machine_facts() -> MachineFacts:
    """This machine, now (the loop takes about a quarter of a second)."""
    try:
        model, extensions = cpu_description(CPUINFO.read_text())
    except OSError:  # not Linux: the name platform gives, the extensions unknown
        model, extensions = "", []
    return MachineFacts(cpu_model=model or platform.processor() or "unknown", logical_cpus=os.cpu_count() or 1,
                        vector_extensions=extensions, python_loop_s=round(python_loop_seconds(), 3),
                        load_average_1m=LOAD_AT_START, python=platform.python_version())
