"""A user drives `nodewright up` with kubectl, as they would a cluster: an empty world; a NodePool
and twenty pods applied; NodeClaims listed Ready with upstream's columns; the pods bound; a lower
`limits.nodes` patched in and the nodes falling to it; a NodeClaim deleted, kubectl returning
once its drain is over and its Node gone; events and the pool's status in `describe`; an invalid
NodePool refused with its field path, changing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, stop_command

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("kubectl")]
BIN = Path(sys.executable).parent
EXAMPLES = ROOT / "examples/kubectl"


class Kubectl:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(BIN / "kubectl"), *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def items(self, resource: str) -> list[dict[str, Any]]:
        return list(json.loads(self("get", resource, "-o", "json").stdout)["items"])


def eventually(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def ready(claim: dict[str, Any]) -> bool:
    conditions = (claim.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
def cluster(tmp_path, fresh_database_url, nats_server_url):
    env = cli_environment(tmp_path, fresh_database_url, nats_server_url)
    env["NODEWRIGHT_DEPLOYMENT"] = f"kubectl{os.getpid()}"
    output = tmp_path / "up.out"
    with output.open("w") as out:
        process = subprocess.Popen(
            [str(BIN / "nodewright"), "up", "--no-live", "--speed", "120"],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
        )
    try:
        eventually(lambda: "export KUBECONFIG=" in output.read_text(), 120, "up to print the kubeconfig")
        line = next(x for x in output.read_text().splitlines() if x.startswith("export KUBECONFIG="))
        kubeconfig = line.removeprefix("export KUBECONFIG=").strip()
        user = {k: v for k, v in os.environ.items() if not k.startswith(("NODEWRIGHT_", "KUBECONFIG"))}
        yield Kubectl({**user, "KUBECONFIG": str(tmp_path / kubeconfig)})
    finally:
        stop_command(process)
        assert process.returncode == 0, output.read_text()


def test_a_user_drives_the_local_cluster_with_kubectl(cluster):
    kubectl = cluster
    assert kubectl.items("nodepools") == []  # an empty world waits for kubectl
    kubectl("apply", "-f", str(EXAMPLES))
    eventually(lambda: len(kubectl.items("nodeclaims")) > 0, 90, "a NodeClaim")
    eventually(lambda: all(ready(c) for c in kubectl.items("nodeclaims")), 90, "every NodeClaim Ready")
    header = kubectl("get", "nodeclaims").stdout.splitlines()[0].split()
    assert header == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    eventually(lambda: all(p["spec"].get("nodeName") for p in kubectl.items("pods")), 90, "every pod bound to a node")
    assert len(kubectl.items("pods")) == 20

    kubectl("patch", "nodepool", "general", "--type", "merge", "-p", '{"spec":{"limits":{"nodes":"1"}}}')
    eventually(lambda: len(kubectl.items("nodes")) <= 1, 120, "the nodes to fall to the new limit")

    (claim,) = kubectl.items("nodeclaims")
    name, node = claim["metadata"]["name"], claim["status"]["nodeName"]
    kubectl("delete", "nodeclaim", name, timeout=120)  # returns once termination has finished
    assert kubectl("get", "nodeclaim", name, check=False).returncode != 0
    eventually(lambda: kubectl("get", "node", node, check=False).returncode != 0, 60, f"node {node} to go")

    reasons = {e["reason"] for e in kubectl.items("events")}
    assert {"Launched", "DisruptionTerminating"} <= reasons or {"Nominated"} <= reasons, reasons
    described = kubectl("describe", "nodepool", "general").stdout
    assert "ValidationSucceeded" in described and "Ready" in described


def test_an_invalid_nodepool_is_refused_with_its_field_and_changes_nothing(cluster, tmp_path):
    kubectl = cluster
    bad = tmp_path / "bad.yaml"
    text = (EXAMPLES / "nodepool.yaml").read_text().replace("expireAfter: 720h", "expireAfter: 30 days")
    bad.write_text(text)
    refused = kubectl("apply", "-f", str(bad), check=False)
    assert refused.returncode != 0
    assert "spec.template.spec.expireAfter" in refused.stderr and "Invalid value" in refused.stderr, refused.stderr
    assert kubectl.items("nodepools") == []
    kubectl("apply", "-f", str(EXAMPLES / "nodepool.yaml"))
    (pool,) = kubectl.items("nodepools")
    changed = kubectl("apply", "-f", str(bad), check=False)  # a change applied again: a merge patch, refused
    assert changed.returncode != 0 and "spec.template.spec.expireAfter" in changed.stderr, changed.stderr
    (after,) = kubectl.items("nodepools")
    assert after["spec"] == pool["spec"] and after["metadata"]["generation"] == pool["metadata"]["generation"]


def test_requests_without_a_token_or_outside_a_services_rules_are_refused(cluster, tmp_path):
    kubectl = cluster
    watcher = Kubectl({**kubectl.env, "KUBECONFIG": str(tmp_path / "data/kube/watcher.kubeconfig")})
    assert watcher("get", "pods").returncode == 0  # the watcher lists and watches pods
    forbidden = watcher("delete", "pod", "anything", check=False)
    assert forbidden.returncode != 0 and "Forbidden" in forbidden.stderr, forbidden.stderr
    anonymous = kubectl("get", "pods", "--token", "not-a-token", check=False)
    assert anonymous.returncode != 0 and "Unauthorized" in anonymous.stderr, anonymous.stderr
