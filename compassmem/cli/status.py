"""``compassmem status``: a tenant's memory health at a glance in the terminal, from a running API
(``GET /v1/health/memory``, ``compassmem dev`` or ``compassmem api``): per conversation events, relations, graph
degree, duplicate rate and relation-confidence drift, the tenant's totals and the worker's lag and dead letters, each
with a few-character sparkline of its last samples (kept by the API process)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from compassmem.cli.api_key import ApiKeyError, add_api_key_options, resolve_api_key
from compassmem.core.config import API_KEY_VARIABLE, Settings
from compassmem.core.contracts.health import MemoryHealth, WorkerHealth
from compassmem.core.contracts.limits import MAX_HEALTH_CONVERSATIONS
from compassmem.core.errors import CompassmemError
from compassmem.core.models import DEFAULT_TENANT
from compassmem.core.terminal import echo

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 12


def add_status_command(commands: argparse._SubParsersAction[Any]) -> None:
    status = commands.add_parser(
        "status", help="memory health at a glance: per conversation and the worker, with trends",
        description="Asks a running API (compassmem dev or compassmem api) for GET /v1/health/memory and prints, "
                    "per conversation, events, relations, average degree, duplicate rate and relation-confidence "
                    "drift, the tenant's totals and the worker's lag and dead letters (when the API process runs "
                    "one), each with a sparkline of its last samples. A tenant with a key: --api-key-file or "
                    f"{API_KEY_VARIABLE}.")
    status.add_argument("--url", help="the API (default http://COMPASSMEM_API_HOST:COMPASSMEM_API_PORT, "
                                      "http://127.0.0.1:8080)")
    status.add_argument("--tenant", default=DEFAULT_TENANT)
    status.add_argument("--conversation", metavar="ID", help="only this conversation")
    status.add_argument("--limit", type=int, default=20,
                        help=f"the most recently updated conversations to show (1-{MAX_HEALTH_CONVERSATIONS}, "
                             "default 20)")
    add_api_key_options(status, whose="the tenant")
    status.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    status.add_argument("--watch", type=float, metavar="SECONDS",
                        help="print it again every SECONDS until interrupted")
    status.set_defaults(handler=cmd_status)


def api_url(settings: Settings) -> str:
    host = settings.api_host if settings.api_host not in ("0.0.0.0", "::", "") else "127.0.0.1"  # noqa: S104
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.api_port}"


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.client import Client

    url = args.url or api_url(settings)
    try:
        key = resolve_api_key(args)
    except ApiKeyError as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    with Client(url, api_key=key) as client:
        while True:
            try:
                health = client.memory_health(tenant=args.tenant, conversation=args.conversation, limit=args.limit)
            except CompassmemError as error:
                hint = (" (is compassmem dev or compassmem api running there? --url names another address)"
                        if error.status is None else "")
                hint += (f" (--api-key-file names a file holding the tenant's key, or set {API_KEY_VARIABLE})"
                         if error.status in (401, 403) else "")
                echo(f"error: {error.message}{hint}", file=sys.stderr)
                return 2
            if args.json:
                echo(health.model_dump_json(indent=2))
            else:
                for line in report_lines(health, url):
                    echo(line)
            if not args.watch:
                return 0
            sys.stdout.flush()
            time.sleep(args.watch)
            echo("")


def sparkline(values: Sequence[float | None], width: int = SPARK_WIDTH) -> str:
    """The last ``width`` values as bars from the lowest to the highest of them; a flat series is a row of mid
    bars, a missing value a space."""
    shown = list(values)[-width:]
    present = [v for v in shown if v is not None]
    if not present:
        return ""
    low, high = min(present), max(present)
    if high - low < 1e-12:
        return "".join(BARS[3] if v is not None else " " for v in shown)
    return "".join(BARS[round((v - low) / (high - low) * (len(BARS) - 1))] if v is not None else " " for v in shown)


def report_lines(health: MemoryHealth, url: str) -> list[str]:
    sampled = health.sampled_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    totals = health.totals
    lines = [f"memory health of tenant {health.tenant!r} at {sampled}, from {url}",
             f"trends: the last {SPARK_WIDTH} samples at most, one per {health.sample_every_s:g} s "
             f"(the API keeps {health.samples_kept})",
             f"tenant: {totals.conversations:,} conversations, {totals.events:,} events, {totals.turns:,} turns  "
             f"events {sparkline(totals.trend.series['events'])}".rstrip(), ""]
    if health.conversations:
        lines += _table(health)
    else:
        lines.append("no conversations yet")
    lines += ["", *_worker_lines(health.worker)]
    warnings = [(c.conversation_id, w) for c in health.conversations for w in c.warnings]
    warnings += [("worker", w) for w in health.worker.warnings]
    if warnings:
        lines += ["", "warnings:", *(f"  {who}: {warning}" for who, warning in warnings)]
    return lines


def _table(health: MemoryHealth) -> list[str]:
    header = ["conversation", "events", "relations", "degree", "duplicates", "conf. drift", "last turn"]
    rows = []
    for c in health.conversations:
        series = c.trend.series
        rows.append([
            c.conversation_id,
            _with(f"{c.events:,}" + (f"+{c.provisional_events}" if c.provisional_events else ""), series["events"]),
            _with(f"{c.relations:,}", series["relations"]),
            _with(f"{c.average_degree:.2f}", series["average_degree"]),
            _with(f"{c.duplicate_rate:.1%}", series["duplicate_rate"]),
            _with(f"{c.confidence_drift:+.3f}" if c.confidence_drift is not None else "–",
                  series["confidence_drift"]),
            c.last_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if c.last_at else "–",
        ])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]


def _with(value: str, values: Sequence[float | None]) -> str:
    line = sparkline(values)
    return f"{value} {line}" if line else value


def _worker_lines(worker: WorkerHealth) -> list[str]:
    if not worker.in_process:
        return [f"worker: {worker.note}"]
    series = worker.trend.series
    letters = ", ".join(f"{kind} {count}" for kind, count in sorted(worker.dead_letters_by_reason.items()))
    drift = (f"{worker.confidence_drift:+.3f} (trend {worker.confidence_trend_per_1000:+.3f} per 1,000 relations)"
             if worker.confidence_drift is not None else "– (too few relations yet)")
    age = (f"{max(0.0, (datetime.now(UTC) - worker.last_batch_at).total_seconds()):.0f} s ago"
           if worker.last_batch_at else "none yet")
    return [f"worker: {worker.note}",
            f"  lag {worker.lag_records:,} records {sparkline(series['lag_records'])}".rstrip(),
            f"  dead letters {worker.dead_letters:,}{f' ({letters})' if letters else ''} "
            f"{sparkline(series['dead_letters'])}".rstrip(),
            f"  relation confidence drift {drift} {sparkline(series['confidence_drift'])}".rstrip(),
            f"  last batch {age}"]

