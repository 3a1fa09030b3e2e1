"""The memory-health thresholds (docs/decisions/015-health-thresholds.md): past what ordinary streams show, the same
in `compassmem status` and in the Prometheus alert rules, and each warning says in one line what to check."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from compassmem.core.contracts.health import (
    FALLING_CONFIDENCE,
    FALLING_CONFIDENCE_TREND,
    GROWING_LAG,
    HIGH_DUPLICATE_MIN_SEGMENTS,
    HIGH_DUPLICATE_RATE,
    LOW_DEGREE,
    LOW_DEGREE_MIN_EVENTS,
)
from compassmem.monitoring.health_warnings import conversation_warnings, worker_warnings

ALERTS = Path(__file__).resolve().parent.parent / "compassmem" / "monitoring" / "prometheus" / "alerts.yml"

# The extremes benchmarks/health_ranges.py measured over ordinary streams (decision 015): LoCoMo dev in file order
# and interleaved, and the TIAGE dev dialogues, read after every batch of 32 turns.
NORMAL_LOWEST_DEGREE = 2.11  # all conversations of the TIAGE stream (LoCoMo: 5.67; per conversation 9.10)
NORMAL_HIGHEST_DUPLICATE_RATE = 0.061  # per conversation (all conversations: 0.036)
NORMAL_LOWEST_CONVERSATION_DRIFT = -0.099
NORMAL_LOWEST_WORKER_DRIFT = -0.058  # the end of the LoCoMo file streamed in order: the warning
NORMAL_LOWEST_TREND = -0.179  # per 1,000 relations
# What a warning names for the reader to look at: a command, a setting, an endpoint or a runbook section.
WHAT_TO_CHECK = re.compile(r"`compassmem [a-z]|COMPASSMEM_[A-Z_]+|GET /v1/|/metrics|runbooks\.md#")


def test_the_figures_of_ordinary_streams_raise_no_warning() -> None:
    assert conversation_warnings("locomo", events=LOW_DEGREE_MIN_EVENTS, degree=NORMAL_LOWEST_DEGREE,
                                 segments=HIGH_DUPLICATE_MIN_SEGMENTS, duplicate_rate=NORMAL_HIGHEST_DUPLICATE_RATE,
                                 drift=NORMAL_LOWEST_CONVERSATION_DRIFT) == []
    assert worker_warnings(lag=0, lag_before=None, dead_letters={}, drift=NORMAL_LOWEST_WORKER_DRIFT) == []
    # At least 1.5 times past the normal extremes (the degree below its lowest, within the adjacency floor of 2).
    assert FALLING_CONFIDENCE <= 1.5 * NORMAL_LOWEST_CONVERSATION_DRIFT
    assert FALLING_CONFIDENCE_TREND <= 1.5 * NORMAL_LOWEST_TREND
    assert HIGH_DUPLICATE_RATE >= 1.5 * NORMAL_HIGHEST_DUPLICATE_RATE
    assert LOW_DEGREE < NORMAL_LOWEST_DEGREE


def test_past_a_threshold_each_warning_says_its_cause_and_what_to_check() -> None:
    warnings = [
        *conversation_warnings("chat-1", events=40, degree=1.2, segments=80, duplicate_rate=0.3, drift=-0.2),
        *worker_warnings(lag=500, lag_before=400, dead_letters={"validate/invalid_fields": 2}, drift=-0.2),
    ]
    assert len(warnings) == 6
    for warning in warnings:
        assert "\n" not in warning and ": " in warning, warning
        assert WHAT_TO_CHECK.search(warning), f"names nothing to check: {warning}"
    assert "GET /v1/conversations/chat-1/graph" in warnings[2]
    assert "validate/invalid_fields" in warnings[4]


def test_a_draining_backlog_is_no_warning() -> None:
    assert worker_warnings(lag=GROWING_LAG + 400, lag_before=GROWING_LAG + 900, dead_letters={}, drift=None) == []
    assert len(worker_warnings(lag=GROWING_LAG + 400, lag_before=None, dead_letters={}, drift=None)) == 1


def test_status_warns_where_the_alert_rules_fire() -> None:
    rules = {rule["alert"]: " ".join(rule["expr"].split())
             for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}
    assert f"< {LOW_DEGREE} )" in rules["CompassmemLowGraphDegree"]
    assert f">= {LOW_DEGREE_MIN_EVENTS}" in rules["CompassmemLowGraphDegree"]
    assert f"> {HIGH_DUPLICATE_RATE} )" in rules["CompassmemHighDuplicateRate"]
    assert f">= {HIGH_DUPLICATE_MIN_SEGMENTS}" in rules["CompassmemHighDuplicateRate"]
    falling = rules["CompassmemRelationConfidenceFalling"]
    assert f"compassmem_relation_confidence_trend < {FALLING_CONFIDENCE_TREND} " in falling
    assert falling.endswith(f"compassmem_relation_confidence_drift < {FALLING_CONFIDENCE}")
    assert f"(compassmem_consumer_lag_records) > {GROWING_LAG} " in rules["CompassmemConsumerLagGrowing"]
