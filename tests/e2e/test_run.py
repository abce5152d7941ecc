"""`nodewright run` plays a scenario to its end with every service, audits, and summarises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(180)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")


def test_the_burst_scenario_keeps_its_node_limit_and_the_audit_is_clean(tmp_path, fresh_database_url, nats_server_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {
        "NODEWRIGHT_DATA_DIR": str(tmp_path / "data"),
        "NODEWRIGHT_DATABASE_URL": fresh_database_url,
        "NODEWRIGHT_NATS_URL": nats_server_url,
    }
    done = subprocess.run(
        [
            NODEWRIGHT,
            "run",
            str(ROOT / "examples/scenarios/burst-node-limit.yaml"),
            "--speed",
            "240",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=150,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert set(summary) == {
        "scenario",
        "events",
        "nodeclaims_created",
        "nodeclaims_terminated",
        "disruptions",
        "max_nodes",
        "limits",
        "pending_pods_at_end",
        "violations",
        "audit_ok",
        "evictions",
        "pdb_violations",
        "final_nodes",
        "terminations",
        "decisions",
        "blocked",
        "max_disrupting",
    }
    for decision in summary["decisions"]:
        assert set(decision) == {"at", "nodepool", "reason", "decision", "nodeclaims", "replacements"}
        assert decision["reason"] in {"Empty", "Underutilized", "Drifted", "Expired", "OverLimit"}
    assert sum(summary["disruptions"].values()) <= sum(len(d["nodeclaims"]) for d in summary["decisions"])
    assert summary["audit_ok"] is True and summary["violations"] == []
    assert summary["limits"] == {"burst": {"nodes": "8"}}
    # how far it gets depends on how fast this machine keeps up at 120x; never past the limit
    assert 1 <= summary["max_nodes"]["burst"] <= 8 and summary["nodeclaims_created"] <= 8
