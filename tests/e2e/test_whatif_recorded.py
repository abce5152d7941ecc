"""`nodewright whatif` on a log the real services recorded: a short day played by `nodewright
run` (every service a process, on the bus and the database), then replayed offline with its own
NodePools. The baseline must be faithful to that record within the documented tolerances
(docs/whatif.md), and a zero budget on web must take web's consolidation away."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shared.config import feature_gates
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url
from tests.whatif_pools import nodepool

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = [sys.executable, "-m", "cli.main"]
"""The checkout's own CLI (and, by PYTHONPATH, its services), wherever the venv's entry point leads."""
SCENARIO = {
    "apiVersion": "nodewright.dev/v1alpha1",
    "kind": "Scenario",
    "metadata": {"name": "whatif-recorded"},
    "spec": {
        "start": "2026-11-23T09:00:00Z",
        "duration": "30m",
        "seed": 3,
        "cloud": {"instanceTypes": 60, "launchLatency": "20s", "registrationLatency": "10s"},
        "nodePools": [nodepool("web", 50, "4", "2", "web"), nodepool("batch", 10, "10", "1", "batch")],
        "workloads": [
            {
                "name": "front",
                "replicas": 2,
                "requests": {"cpu": "1", "memory": "1Gi"},
                "nodeSelector": {"tier": "web"},
            },
            {
                "name": "jobs",
                "replicas": 2,
                "requests": {"cpu": "1", "memory": "1Gi"},
                "nodeSelector": {"tier": "batch"},
            },
        ],
        "timeline": [
            {"at": "2m", "scale": {"workload": "front", "replicas": 12}},
            {"at": "2m", "scale": {"workload": "jobs", "replicas": 5}},
            {"at": "14m", "scale": {"workload": "front", "replicas": 2}},
            {"at": "16m", "scale": {"workload": "jobs", "replicas": 1}},
        ],
    },
}


def nodewright(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = env | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))}
    return subprocess.run([*NODEWRIGHT, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=240)


def test_a_log_the_services_recorded_replays_faithfully(tmp_path, database_server_url, nats_server_url):
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    env = cli_environment(tmp_path, database_server_url, nats_server_url, f"wi{os.getpid()}")
    run = nodewright(env, tmp_path, "run", str(path), "--speed", "120", "-o", "json")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    name = json.loads(run.stdout)["run"]
    frozen = tmp_path / "web.yaml"
    frozen.write_text(yaml.safe_dump(nodepool("web", 50, "4", "0", "web")))
    exported = tmp_path / "day.jsonl"
    try:
        out = nodewright(env, tmp_path, "whatif", "--run", name, "--nodepool", str(frozen), "-o", "json")
        export = nodewright(env, tmp_path, "events", "export", str(exported), "--run", name)
        log = [json.loads(line) for line in exported.read_text().splitlines() if '"type"' in line]
        done = {e["data"]["decision_id"] for e in log if e["type"] == "DisruptionCompleted"}
        decided = next(
            e["data"]["candidates"][0]
            for e in log
            if e["type"] == "DisruptionDecided" and e["data"]["decision_id"] in done
        )
        explained = nodewright(env, tmp_path, "explain", "nodeclaim", decided, "--run", name, "-o", "json")
    finally:
        asyncio.run(drop_run_log(run_log_url(database_server_url, name)))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout)
    fidelity = result["fidelity"]
    assert fidelity["faithful"], fidelity["beyond"]
    assert fidelity["seed"] == {"value": 3, "from": f"run {name}'s description", "known": True}
    assert fidelity["pools"]["web"]["node_hours"]["recorded"] > 0
    # the disruption process recorded its gates once, and both replays weighed the run by them
    assert [e["data"] for e in log if e["type"] == "FeatureGatesObserved"] == [
        {"service": "disruption", "gates": feature_gates(env.get("NODEWRIGHT_FEATURE_GATES", ""))}
    ]
    assert fidelity["gates"]["source"] == "log"
    base, changed = result["baseline"]["pools"], result["changed"]["pools"]
    assert base["web"]["disruptions"], "the record consolidates web: the zero budget must have something to stop"
    assert not {"Empty", "Underutilized"} & set(changed["web"]["disruptions"])
    assert changed["web"]["node_hours"] > base["web"]["node_hours"]
    assert result["seconds"] < 60
    assert export.returncode == 0 and "the run's sim seed is 3" in export.stdout, export.stderr[-3000:]
    from_file = nodewright(env, tmp_path, "whatif", "--from-file", str(exported), "--seed", "3")
    assert from_file.returncode == 0, from_file.stderr[-3000:]
    assert "sim seed 3 (--seed)" in from_file.stdout and "faithful: every figure" in from_file.stdout
    bad = nodewright(env, tmp_path, "whatif", "--from-file", str(exported), "--seed", "three")
    assert bad.returncode == 2 and "--seed" in bad.stderr and "Traceback" not in bad.stderr
    # explain, from the same run's own database: the decision and its budget snapshot, at its seed
    assert explained.returncode == 0, explained.stderr[-3000:]
    answer = json.loads(explained.stdout)
    assert answer["disrupted"] and answer["decision"]["budget_check"]
    assert (answer["seed"], answer["seed_from"]) == (3, f"run {name}'s description")
    assert answer["gates_source"] == "log" and answer["gates_from"].startswith("the log: recorded at ")
