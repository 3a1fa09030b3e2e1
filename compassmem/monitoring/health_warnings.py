"""The warnings of the memory-health report (`compassmem status`, the explorer's Health tab): a figure past its
threshold, in one line with its likely cause and what to check.

The thresholds are the alert rules' (``core/contracts/health.py``, ``prometheus/alerts.yml``), set beyond the range
the figures keep over ordinary streams (``docs/decisions/015-health-thresholds.md``), so that a warning means
something to look at rather than a conversation going on as conversations do.
"""

from __future__ import annotations

from compassmem.core.contracts.health import (
    FALLING_CONFIDENCE,
    GROWING_LAG,
    HIGH_DUPLICATE_MIN_SEGMENTS,
    HIGH_DUPLICATE_RATE,
    LOW_DEGREE,
    LOW_DEGREE_MIN_EVENTS,
)

RUNBOOKS = "docs/runbooks.md"


def conversation_warnings(conversation_id: str, *, events: int, degree: float, segments: int,
                          duplicate_rate: float, drift: float | None) -> list[str]:
    warnings = []
    if events >= LOW_DEGREE_MIN_EVENTS and degree < LOW_DEGREE:
        warnings.append(f"average degree {degree:.2f} is below {LOW_DEGREE}: its events are barely related (even "
                        "consecutive events are not linked: writes to the graph store are failing); check the store "
                        "errors on /metrics and the worker log for stream.turn_failed")
    if segments >= HIGH_DUPLICATE_MIN_SEGMENTS and duplicate_rate > HIGH_DUPLICATE_RATE:
        warnings.append(f"duplicate rate {duplicate_rate:.1%} is above {HIGH_DUPLICATE_RATE:.0%}: new segments are "
                        "merged into earlier events, most likely the same turns sent again under new turn ids; check "
                        f"the ids the producer sends ({RUNBOOKS}#compassmemhighduplicaterate)")
    if drift is not None and drift < FALLING_CONFIDENCE:
        warnings.append(_falling_confidence(
            drift, "its new relations are far less certain than its earlier ones, likely a kind of conversation the "
            f"relation cues do not cover; read them with GET /v1/conversations/{conversation_id}/graph"))
    return warnings


def worker_warnings(*, lag: int, lag_before: float | None, dead_letters: dict[str, int],
                    drift: float | None) -> list[str]:
    """``lag_before``: the lag of the previous sample, if any (a backlog draining after a burst is normal)."""
    warnings = []
    if lag > GROWING_LAG and (lag_before is None or lag >= lag_before):
        warnings.append(f"{lag} turns records wait and the backlog is not draining: the worker is slower than the "
                        "turns arrive; find the slow stage on /metrics (compassmem_stage_duration_seconds), then add "
                        "workers (up to COMPASSMEM_KAFKA_PARTITIONS) or raise COMPASSMEM_STREAM_BATCH_SIZE")
    letters = sum(dead_letters.values())
    if letters:
        reasons = ", ".join(sorted(dead_letters))
        warnings.append(f"{letters} record{' was' if letters == 1 else 's were'} dead-lettered ({reasons}): the "
                        "worker refused what was sent; read them from the dead-letter topic (COMPASSMEM_DLQ_TOPIC, "
                        f"compassmem.dlq by default) as {RUNBOOKS}#compassmemdeadletters shows")
    if drift is not None and drift < FALLING_CONFIDENCE:
        warnings.append(_falling_confidence(
            drift, "new relations are far less certain than earlier ones, likely a new kind of conversation in the "
            "stream; find it with `compassmem status` per tenant and read its relations"))
    return warnings


def _falling_confidence(drift: float, cause: str) -> str:
    return (f"relation confidence drift {drift:+.3f} is below {FALLING_CONFIDENCE}: {cause} "
            f"({RUNBOOKS}#compassmemrelationconfidencefalling)")
