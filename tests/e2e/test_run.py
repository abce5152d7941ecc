"""`nodewright run` plays a scenario to its end with every service on a log of its own, audits,
summarises and reports; `nodewright report` rebuilds the report from an exported log. The
scenario is the flagship day `make demo` plays, and the test holds it to its promises."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.processes import drop_run_log, run_log_url

pytestmark = pytest.mark.timeout(420)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
FLAGSHIP = ROOT / "examples/scenarios/flagship-day.yaml"
SUMMARY_KEYS = {
    "scenario",
    "run",
    "report",
    "events",
    "from",
    "to",
    "nodeclaims_created",
    "nodeclaims_terminated",
    "disruptions",
    "decisions_by_reason",
    "decisions",
    "blocked",
    "blocked_by_reason",
    "max_disrupting",
    "max_nodes",
    "limits",
    "node_limits",
    "over_limit",
    "instances_lost",
    "disruptions_inside_blocked_windows",
    "pending_pods_at_end",
    "violations",
    "audit_ok",
    "evictions",
    "pdb_violations",
    "final_nodes",
    "terminations",
    "samples",
    "head_digest",
    "restarts",
}


def nodewright(env: dict[str, str], cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NODEWRIGHT, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def test_the_flagship_day_keeps_its_promises_and_its_report_rebuilds_from_an_export(
    tmp_path, fresh_database_url, nats_server_url
):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {
        "NODEWRIGHT_DATA_DIR": str(tmp_path / "data"),
        "NODEWRIGHT_DATABASE_URL": fresh_database_url,
        "NODEWRIGHT_NATS_URL": nats_server_url,
    }
    out = tmp_path / "report"
    done = nodewright(
        env, tmp_path, "run", str(FLAGSHIP), "--speed", "720", "--report", str(out), "-o", "json", timeout=360
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout)
    try:
        assert set(summary) == SUMMARY_KEYS and summary["restarts"] == {}
        # the promises: a clean audit, no launch past a limit, no disruption in a blocked window
        assert summary["audit_ok"] is True and summary["violations"] == []
        assert summary["over_limit"] == [] and summary["disruptions_inside_blocked_windows"] == []
        assert summary["node_limits"] == {"web": [8, 5]} and summary["max_nodes"]["web"] <= 8
        # each act of the day happened
        assert {"Drifted", "OverLimit"} <= set(summary["disruptions"])
        assert {"Empty", "Underutilized"} & set(summary["disruptions"])
        assert summary["instances_lost"] >= 1  # the spot interruption
        assert summary["blocked_by_reason"].get("Budget/Underutilized", 0) >= 1  # backend1a's weekday block
        assert summary["max_disrupting"].get("batch", 0) <= 1 and summary["max_disrupting"].get("backend1a", 0) <= 1
        assert summary["pdb_violations"] == 0
        assert set(summary["samples"]) == {"burst", "consolidated", "drifted"}
        # the report
        png = (out / "nodes.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
        width, height = struct.unpack(">II", png[16:24])
        assert 1000 <= width <= 3000 and 600 <= height <= 2000
        page = (out / "report.md").read_text()
        for reason in summary["disruptions"]:
            assert f"| {reason} |" in page
        assert json.loads((out / "summary.json").read_text())["decisions"] == summary["decisions"]
        # the run is listed, and its export rebuilds the same report
        listed = json.loads(nodewright(env, tmp_path, "runs", "-o", "json").stdout)
        assert summary["run"] in [r["name"] for r in listed]
        log = tmp_path / "log.jsonl"
        exported = nodewright(env, tmp_path, "events", "export", str(log), "--run", summary["run"])
        assert exported.returncode == 0, exported.stderr
        again = nodewright(env, tmp_path, "report", str(tmp_path / "again"), "--from-file", str(log))
        assert again.returncode == 0, again.stderr
        rebuilt = json.loads((tmp_path / "again" / "summary.json").read_text())
        for key in ("decisions", "disruptions", "max_nodes", "over_limit", "samples", "head_digest", "events"):
            assert rebuilt[key] == summary[key], key
    finally:
        asyncio.run(drop_run_log(run_log_url(fresh_database_url, summary["run"])))
