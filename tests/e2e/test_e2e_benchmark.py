"""`benchmarks/e2e.py` end to end at a small size: every service started as `nodewright up` starts
them, a burst of 50 pods, every pod bound and every figure there. No timing is checked: the
benchmark's code (and `up`'s child-starting helpers it reuses) is."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.e2e import SERVICES, render, run_once

pytestmark = pytest.mark.timeout(120)


def test_a_small_burst_is_bound_and_measured(tmp_path: Path, migrated_url: str, nats_server_url: str):
    r = run_once(migrated_url, nats_server_url, tmp_path / "run", pods=50, warmup=30, launch="0s", registration="0s")
    assert r["bound"] == 50 and r["nodeclaims"] >= 1 and r["launch_failures"] == 0
    stages = list(r["stages_s"].values())
    assert all(math.isfinite(s) for s in stages)
    assert (
        r["stages_s"]["last PodPending committed"] <= r["window_s"] <= r["burst_to_durable_s"] <= r["burst_to_bound_s"]
    )
    assert r["after_window_s"] == pytest.approx(r["burst_to_durable_s"] - r["window_s"])
    assert all(r["rss_peak_mb"][name] > 0 and r["pss_peak_mb"][name] > 0 for name in SERVICES)
    assert r["rss_peak_total_mb"] >= max(r["rss_peak_mb"].values())
    assert "burst -> all 50 pods bound" in render(r)
