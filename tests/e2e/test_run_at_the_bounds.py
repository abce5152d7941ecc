"""A NodePool with every value at its bound plays through `nodewright run` with no process
restarted: the values past them crash-looped the disruption service and the scheduler while
`run` reported "audit OK" (issue 38). Those are refused before anything starts
(`tests/e2e/test_cli_bad_input.py`); at the bounds themselves every service computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shared.api.bounds import MAX_INT32
from tests.e2e.processes import cli_environment

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


def test_a_nodepool_at_every_bound_plays_with_no_restart(tmp_path, database_server_url, nats_server_url):
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
    env = cli_environment(tmp_path, database_server_url, nats_server_url, f"bd{os.getpid()}")
    run = subprocess.run(
        [NODEWRIGHT, "run", str(path), "--speed", "120", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["restarts"] == {}, summary["restarts"]
    assert summary["audit_ok"] and not summary["violations"]
    assert summary["nodeclaims_created"] >= 4
    # the budget active for 292 years allows 2147483647: the three emptied nodes go
    assert summary["decisions_by_reason"].get("Empty", 0) >= 1, summary["decisions_by_reason"]
    assert summary["pending_pods_at_end"] == 0
