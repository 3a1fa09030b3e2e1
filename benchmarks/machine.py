"""What machine a benchmark ran on, written beside its figures: the speed goals are absolute, and the machines the
benchmarks run on differ by a factor of two and more.

Two things decide most of compassmem's timings: how fast the CPU runs plain Python (segmentation, relations, the
walk, the stores' client code) and which vector instructions it has for the int8 embedder (the query API embedded a
question in 3.4 ms at the median on a machine with AVX-512 VNNI, and in 6.3 ms on one with AVX2 only whose plain
Python ran as fast). So next to the CPU's name and count, a result records its vector extensions and the time of a
fixed pure-Python loop, measured when the results are written, as a median with its spread: the same virtual machine
was seen switching between 33 and 52 ms per million additions from one half-second to the next, which is what makes
a single timing on it unreliable. The load average when the benchmark started says whether something else had been
running, and the share of CPU time the hypervisor took (steal) during the benchmark whether the host was busy.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

from pydantic import BaseModel, Field

CPUINFO = Path("/proc/cpuinfo")
PROC_STAT = Path("/proc/stat")
# The extensions that change the embedder's speed, in the order they are reported.
VECTOR_EXTENSIONS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
LOOP_ADDITIONS = 1_000_000
LOOP_RUNS = 9


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not available on this platform
        return None


def cpu_times(stat: str) -> tuple[int, int] | None:
    """(all CPU time, the hypervisor's steal) in ticks since boot, from /proc/stat's text; None if it has no
    steal column."""
    fields = stat.split("\n", 1)[0].split()
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[7]


def _cpu_times_now() -> tuple[int, int] | None:
    try:
        return cpu_times(PROC_STAT.read_text())
    except OSError:  # not Linux
        return None


# Taken when a benchmark imports this module, before it loads the machine itself.
LOAD_AT_START = _load_average()
CPU_TIMES_AT_START = _cpu_times_now()


class MachineFacts(BaseModel):
    cpu_model: str
    logical_cpus: int
    vector_extensions: list[str] = Field(description="of VECTOR_EXTENSIONS, those the CPU has")
    python_loop_ms: float = Field(description=f"median ms of {LOOP_RUNS} runs of {LOOP_ADDITIONS:,} additions in a "
                                              "pure-Python loop")
    python_loop_range_ms: tuple[float, float] = Field(description="the fastest and the slowest of those runs")
    load_average_1m: float | None = Field(description="the 1-minute load average when the benchmark started")
    steal_share: float | None = Field(description="share of all CPU time the hypervisor took between the benchmark's "
                                                  "start and its results (None where the system does not say)")
    python: str

    def line(self) -> str:
        extensions = ", ".join(self.vector_extensions) or "no AVX2"
        fastest, slowest = self.python_loop_range_ms
        load = f"load {self.load_average_1m:.2f} at start" if self.load_average_1m is not None else "load unknown"
        steal = f"steal {100 * self.steal_share:.1f}%" if self.steal_share is not None else "steal unknown"
        return (f"machine: {self.cpu_model}, {self.logical_cpus} CPUs ({extensions}); Python loop "
                f"{self.python_loop_ms:.0f} ms per million additions ({fastest:.0f}-{slowest:.0f}); {load}; {steal}; "
                f"Python {self.python}")


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


def steal_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    """The share of CPU time stolen between two ``cpu_times`` readings."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    return round((end[1] - start[1]) / (end[0] - start[0]), 4)


def machine_facts() -> MachineFacts:
    """This machine, now (the loop runs take about a third of a second in all)."""
    try:
        model, extensions = cpu_description(CPUINFO.read_text())
    except OSError:  # not Linux: the name platform gives, the extensions unknown
        model, extensions = "", []
    loops = sorted(1000 * python_loop_seconds() for _ in range(LOOP_RUNS))
    return MachineFacts(cpu_model=model or platform.processor() or "unknown", logical_cpus=os.cpu_count() or 1,
                        vector_extensions=extensions, python_loop_ms=round(statistics.median(loops), 1),
                        python_loop_range_ms=(round(loops[0], 1), round(loops[-1], 1)),
                        load_average_1m=LOAD_AT_START, steal_share=steal_share(CPU_TIMES_AT_START, _cpu_times_now()),
                        python=platform.python_version())
