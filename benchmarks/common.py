"""Shared plumbing for the benchmark scripts: data path, JSON results, tables."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import machine_facts

REPO_ROOT = Path(__file__).resolve().parent.parent
# The LoCoMo data is not part of the repository (CC BY-NC): its path comes from --data or LOCOMO_DATA.
DATA_VARIABLE = "LOCOMO_DATA"
DEFAULT_DATA: Path | None = Path(os.environ[DATA_VARIABLE]) if os.environ.get(DATA_VARIABLE) else None
RESULTS_DIR = REPO_ROOT / "results"


def require_data(path: Path | None) -> Path:
    """The evaluation data is not part of the repository (CC BY-NC); say so plainly when it is missing."""
    if path is None or not path.exists():
        where = f"at {path}" if path is not None else "(no path given)"
        print(f"skipped: LoCoMo data not found {where}; pass --data PATH or set {DATA_VARIABLE}", file=sys.stderr)
        sys.exit(0)
    return path


def write_results(path: Path, results: dict[str, Any]) -> None:
    """The results as JSON, with the machine they were measured on (``benchmarks.machine``)."""
    machine = machine_facts()
    print(machine.line())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**results, "machine": machine.model_dump()}, indent=2, default=str) + "\n")
    print(f"results written to {path}")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        print("  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths))))
        if index == 0:
            print("  ".join("-" * w for w in widths))


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def latency_stats(samples_ms: Sequence[float]) -> dict[str, float]:
    values = np.asarray(samples_ms, dtype=np.float64)
    return {"p50": float(np.percentile(values, 50)), "p90": float(np.percentile(values, 90)),
            "p99": float(np.percentile(values, 99)), "mean": float(values.mean()), "max": float(values.max()),
            "n": len(values)}


def timed(ask: Callable[[str], Any], questions: Sequence[str]) -> list[float]:
    """Milliseconds of each ``ask(question)``, one after the other."""
    samples = []
    for question in questions:
        started = time.perf_counter()
        ask(question)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def stopwatch(ask: Callable[[str], Any]) -> Callable[[str], float]:
    """``ask`` as a path for ``alternating``: it returns the milliseconds of each call."""
    def measured(question: str) -> float:
        started = time.perf_counter()
        ask(question)
        return (time.perf_counter() - started) * 1000
    return measured


def alternating(paths: dict[str, Callable[[str], float]], questions: Sequence[str]) -> dict[str, list[float]]:
    """Milliseconds of each question on every path (each path returns its own), the paths taking turns at going
    first: whichever asks a question first loads its candidates into the shared hot tier, so a fixed order (all
    in-process, then all over HTTP) gave every cold load to one path and made the other look faster."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths)
    for index, question in enumerate(questions):
        for name in order[index % len(order):] + order[: index % len(order)]:
            samples[name].append(paths[name](question))
    return samples


def cached_vectors(embed: Callable[[list[str]], np.ndarray], dim: int, texts: list[str], model_name: str,
                   cache_dir: Path | None, label: str) -> np.ndarray:
    """``embed(texts)``, or what an earlier run saved in ``cache_dir`` for exactly these texts and this model."""
    digest = hashlib.sha256("\n".join([model_name, *texts]).encode("utf-8")).hexdigest()[:16]
    path = cache_dir / f"{label}-{digest}.npy" if cache_dir is not None else None
    if path is not None and path.exists():
        vectors = np.load(path)
        if vectors.shape == (len(texts), dim):
            print(f"{label} vectors from {path}", flush=True)
            return vectors
    print(f"embedding {len(texts)} texts ({label}) ...", flush=True)
    vectors = embed(texts)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors


def write_dataset(out: Path, records: list[Any], what: str) -> None:
    """Write a recipe's records as one JSON document and say how many (``what``: "dialogues", "chats")."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records), encoding="utf-8")
    print(f"{len(records)} {what} written to {out}")
