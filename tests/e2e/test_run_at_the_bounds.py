"""A NodePool with every value at its bound plays through `nodewright run` with no process
restarted: the values past them crash-looped the disruption service and the scheduler while
`run` reported "audit OK" (issue 38). Those are refused before anything starts
(`tests/e2e/test_cli_bad_input.py`); at the bounds themselves every service computes.

The run is signed (NODEWRIGHT_SIGNING_KEY): every service signs what it appends, the audit given
the key verifies every event, a wrong key fails it, and the key never reaches a log."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shared.api.bounds import MAX_INT32
from shared.policy.digests import Signer
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
AT = "2562047h47m16s"  # Go's longest duration, in the whole seconds the CRD's patterns allow

POOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "edge", "labels": {"example.com/team": "x" * 63}},
    "spec": {
        "template": {
            "metadata": {"annotations": {"example.com/note": "at the bounds"}},
            "spec": {
                "nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "default"},
                "requirements": [
                    {"key": "sim.nodewright.dev/instance-cpu", "operator": "In", "values": ["2"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
                "expireAfter": AT,
                "terminationGracePeriod": AT,
            },
        },
        "limits": {"nodes": "9223372036854775807m", "cpu": "9223372036854775.807", "memory": "8Pi"},
        "disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "0s",
            "budgets": [
                {
                    "nodes": str(MAX_INT32),
                    "schedule": "*/2 * * * *",
                    "duration": "2562047h47m",
                    "timeZone": "America/Chicago",
                }
            ],
        },
        "weight": 100,
    },
}


KEY = "9f2c4e1a7b3d5f608192a3b4c5d6e7f8-signing-key-for-the-test"


def nodewright(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NODEWRIGHT, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=240)


def test_a_signed_run_of_a_nodepool_at_every_bound_plays_with_no_restart_and_verifies(
    tmp_path, database_server_url, nats_server_url
):
    scenario = {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "at-the-bounds"},
        "spec": {
            "start": "2026-11-25T08:00:00Z",
            "duration": "40m",
            "nodePools": [POOL],
            "workloads": [
                {
                    "name": "web",
                    "replicas": 4,
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {"app": "web"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                }
            ],
            "timeline": [{"at": "15m", "scale": {"workload": "web", "replicas": 1}}],
        },
    }
    path = tmp_path / "bounds.yaml"
    path.write_text(yaml.safe_dump(scenario))
    plain = cli_environment(tmp_path, database_server_url, nats_server_url, f"bd{os.getpid()}")
    signing = plain | {"NODEWRIGHT_SIGNING_KEY": KEY}
    run = nodewright(signing, tmp_path, "run", str(path), "--speed", "120", "-o", "json")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["restarts"] == {}, summary["restarts"]
    assert summary["audit_ok"] and not summary["violations"]
    assert summary["nodeclaims_created"] >= 4
    # the budget active for 292 years allows 2147483647: the three emptied nodes go
    assert summary["decisions_by_reason"].get("Empty", 0) >= 1, summary["decisions_by_reason"]
    assert summary["pending_pods_at_end"] == 0

    # signed: the audit with the key verifies every event; a wrong key fails it; none checks none
    key, wrong = tmp_path / "key", tmp_path / "wrong"
    key.write_text(KEY + "\n")
    wrong.write_text("another key, as long as a key must be\n")
    try:
        audited = nodewright(plain, tmp_path, "audit", "--run", summary["run"], "--key-file", str(key), "-o", "json")
        assert audited.returncode == 0, audited.stdout + audited.stderr
        chain = json.loads(audited.stdout)["chain"]
        key_id = Signer(KEY.encode()).key_id.hex()
        assert chain["problems"] == []
        assert chain["signatures"] == {
            "checked": True,
            "key_id": key_id,
            "signed": summary["events"],
            "before_signing": 0,
        }
        by_env = nodewright(signing, tmp_path, "audit", "--run", summary["run"])
        assert by_env.returncode == 0 and f"signatures: {summary['events']} event(s) verified" in by_env.stdout
        refused = nodewright(plain, tmp_path, "audit", "--run", summary["run"], "--key-file", str(wrong))
        assert refused.returncode == 1
        assert f"{summary['events']} event(s) signed with key id {key_id}" in refused.stdout
        unchecked = nodewright(plain, tmp_path, "audit", "--run", summary["run"])
        assert unchecked.returncode == 0 and "signatures: not checked" in unchecked.stdout
    finally:
        asyncio.run(drop_run_log(run_log_url(database_server_url, summary["run"])))
    written = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and p.suffix in (".log", ".json", ".jsonl")]
    assert written, "the services wrote their logs under the data directory"
    for written_path in written:
        assert KEY not in written_path.read_text(errors="replace"), written_path
