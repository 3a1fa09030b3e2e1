"""Every benchmark result names the machine it was measured on (benchmarks/machine.py, written by write_results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common import write_results
from benchmarks.machine import VECTOR_EXTENSIONS, cpu_description, cpu_times, machine_facts, steal_share

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16
processor\t: 1
model name\t: AMD EPYC 9B14
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16
"""


def test_the_cpu_is_named_with_the_vector_extensions_the_embedder_uses() -> None:
    assert cpu_description(CPUINFO) == ("AMD EPYC 9B14", ["avx2", "avx512f", "avx512_vnni"])
    # avx512bw and avx512_bf16 are flags too, but only VECTOR_EXTENSIONS are reported, whole words only.
    assert cpu_description("model name : old one\nflags : sse2 avx avx512_vnni_x\n") == ("old one", [])
    assert cpu_description("") == ("", [])


def test_the_hypervisors_share_of_cpu_time_is_read_from_proc_stat() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    before = cpu_times("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n")
    after = cpu_times("cpu  200 0 80 1500 10 0 0 60 0 0\n")
    assert before == (1000, 40) and after == (1850, 60)
    assert steal_share(before, after) == pytest.approx(20 / 850, abs=1e-4)
    assert cpu_times("cpu  1 2 3 4\n") is None and cpu_times("") is None
    assert steal_share(None, after) is None and steal_share(after, after) is None


def test_this_machine_is_described_with_a_timed_python_loop() -> None:
    facts = machine_facts()
    assert facts.logical_cpus >= 1 and facts.cpu_model
    assert set(facts.vector_extensions) <= set(VECTOR_EXTENSIONS)
    fastest, slowest = facts.python_loop_range_ms
    assert 0 < fastest <= facts.python_loop_ms <= slowest < 60_000
    assert facts.load_average_1m is None or facts.load_average_1m >= 0
    assert facts.steal_share is None or 0 <= facts.steal_share <= 1
    assert facts.line().startswith(f"machine: {facts.cpu_model}, {facts.logical_cpus} CPUs")


def test_results_are_written_with_the_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deep" / "result.json"
    write_results(out, {"turns_per_s": 12.5})
    written = json.loads(out.read_text())
    assert written["turns_per_s"] == 12.5
    assert set(written["machine"]) == {"cpu_model", "logical_cpus", "vector_extensions", "python_loop_ms",
                                       "python_loop_range_ms", "load_average_1m", "steal_share", "python"}
    printed = capsys.readouterr().out
    assert "machine: " in printed and f"results written to {out}" in printed
