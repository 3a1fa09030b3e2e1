"""The dashboard plot renders what it is given: four panels, alert lines, a real PNG file."""

from __future__ import annotations

from pathlib import Path

from benchmarks.dashboard_plot import render


def test_render_writes_a_png_of_the_sampled_figures(tmp_path: Path) -> None:
    samples = [{"t": 0.5 * i, "degree_all": 2.0 + i / 10, "degree_semantic": 1.0 + i / 20,
                "event_duplicate_ratio": 0.02 * (i % 3), "confidence_recent": 0.7, "confidence_reference": 0.72,
                "relation_confidence_drift": -0.02, "lag_p0": max(0, 40 - 4 * i), "lag_p1": max(0, 20 - 4 * i)}
               for i in range(20)]
    out = tmp_path / "plots" / "dashboard.png"
    render(samples, "test run", out)
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
