"""`nodewright run --cloud aws` against a moto server over HTTP: every service its own process,
EC2 and SQS in moto as the cloud. The scenario's account is made on moto, its EC2NodeClass
resolves Ready, the burst launches through CreateFleet; a spot interruption warning put on the
interruption queue drains that node, its pods land elsewhere and its offering is avoided; the
nodes left empty are removed; the audit is clean and explains the interruption; at the end moto's
running instances are exactly the run's live NodeClaims, each tagged as upstream tags them, in a
subnet the class resolved."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.aws import REGION, moto_url
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url, stop_command

__all__ = ["moto_url"]

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
SCENARIO = ROOT / "examples/scenarios/aws-moto.yaml"
TYPES = {"m5.large", "m5.xlarge", "c5.large"}
KEYS = {"region_name": REGION, "aws_access_key_id": "t", "aws_secret_access_key": "t"}


def instances(ec2: Any, cluster: str) -> list[dict[str, Any]]:
    """The cluster's instances in any state, each with its tags as a dict (`tags`)."""
    found = ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": [f"kubernetes.io/cluster/{cluster}"]}])
    out = [i for r in found["Reservations"] for i in r["Instances"]]
    for instance in out:
        instance["tags"] = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    return out


def offering(instance: dict[str, Any]) -> tuple[str, str, str]:
    return instance["InstanceType"], instance["Placement"]["AvailabilityZone"], instance.get("InstanceLifecycle", "")


def spot_warning(instance_id: str) -> str:
    """EventBridge's spot interruption warning, as AWS documents it."""
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-11-23T09:05:00Z",
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def interrupt_one(
    ec2: Any, sqs: Any, queue: str, cluster: str, run: subprocess.Popen[str]
) -> tuple[dict[str, Any], set[str], datetime]:
    """Once two instances run (their nodes registered meanwhile), a spot warning for one of them;
    the ids of every instance there was then, and when it was sent."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        running = sorted(
            (i for i in instances(ec2, cluster) if i["State"]["Name"] == "running"), key=lambda i: i["LaunchTime"]
        )
        if len(running) >= 2:
            time.sleep(4)  # four simulated minutes: registered, Ready, the pods bound
            there = {i["InstanceId"] for i in instances(ec2, cluster)}
            sent = datetime.now(UTC)
            sqs.send_message(QueueUrl=queue, MessageBody=spot_warning(running[0]["InstanceId"]))
            return running[0], there, sent
        time.sleep(0.5)
    raise AssertionError("no two instances ran in time")


def test_a_scenario_played_on_moto_keeps_the_promises_and_leaves_exactly_its_live_claims_running(
    tmp_path: Path, database_server_url: str, nats_server_url: str, moto_url: str
):
    cluster = f"aws{os.getpid()}"
    ec2 = boto3.client("ec2", endpoint_url=moto_url, **KEYS)
    sqs = boto3.client("sqs", endpoint_url=moto_url, **KEYS)
    queue = sqs.create_queue(QueueName=f"{cluster}-interruptions")["QueueUrl"]
    env = cli_environment(tmp_path, database_server_url, nats_server_url, cluster)
    env |= {
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "NODEWRIGHT_CLUSTER_NAME": cluster,
        "NODEWRIGHT_INTERRUPTION_QUEUE": f"{cluster}-interruptions",
    }
    run = subprocess.Popen(
        [NODEWRIGHT, "run", str(SCENARIO), "--cloud", "aws", "--speed", "60", "-o", "json"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        interrupted, there, sent = interrupt_one(ec2, sqs, queue, cluster, run)
        stdout, stderr = run.communicate(timeout=240)
    finally:
        stop_command(run)
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]
    summary = json.loads(stdout)
    log = run_log_url(database_server_url, summary["run"])
    assert summary["audit_ok"] is True and summary["violations"] == [] and summary["over_limit"] == []
    assert summary["restarts"] == {} and summary["pending_pods_at_end"] == 0
    told = {k: summary[k] for k in ("disruptions", "blocked_by_reason", "terminations", "max_nodes", "final_nodes")}
    assert set(summary["disruptions"]) & {"Empty", "Underutilized"}, told  # the nodes the scale-down emptied

    # the interrupted claim: drained (its pods evicted, to run elsewhere), its instance terminated
    claim = interrupted["tags"]["karpenter.sh/nodeclaim"]
    (ended,) = [t for t in summary["terminations"] if t["nodeclaim"] == claim]
    assert ended["reason"] == "spot_interrupted" and ended["evicted"] >= 1 and ended["terminated_at"]
    after = sorted((i for i in instances(ec2, cluster) if i["InstanceId"] not in there), key=lambda i: i["LaunchTime"])
    assert interrupted.get("InstanceLifecycle") == "spot" and after, "nothing replaced the interrupted spot node"
    # the replacement, launched while the offering cache holds the interrupted offering (three
    # simulated minutes: three seconds at 60x), avoids it; later launches may take it again
    replacement = after[0]
    assert replacement["LaunchTime"] - sent < timedelta(seconds=3), (replacement["LaunchTime"], sent)
    assert offering(replacement) != offering(interrupted)
    explained = subprocess.run(
        [NODEWRIGHT, "audit", "--run", summary["run"], "--explain", f"nodeclaim-{claim}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "spot_interrupted" in explained.stdout and interrupted["InstanceId"] in explained.stdout, explained.stdout
    # replaced before its instance went: the replacement launched, on the log's simulated clock,
    # before the interrupted claim's termination (upstream drains and replaces within the notice)
    launched, terminated, providers = asyncio.run(_when(log, replacement["tags"]["karpenter.sh/nodeclaim"], claim))
    assert launched < terminated, (launched, terminated)
    asyncio.run(drop_run_log(log))

    # moto's running instances are exactly the live claims, tagged as upstream tags them
    mine = instances(ec2, cluster)
    running = [i for i in mine if i["State"]["Name"] in ("pending", "running")]
    gone = {i["tags"]["karpenter.sh/nodeclaim"] for i in mine if i["State"]["Name"] == "terminated"}
    assert len(running) == sum(summary["final_nodes"].values())
    assert gone == {t["nodeclaim"] for t in summary["terminations"]}  # each ended claim's instance is gone
    subnets = {s["SubnetId"] for s in ec2.describe_subnets()["Subnets"] if s["CidrBlock"].startswith("10.0.")}
    for instance in running:
        tags = instance["tags"]
        assert instance["InstanceType"] in TYPES and instance["SubnetId"] in subnets
        assert tags["karpenter.sh/nodepool"] == "general" and tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
        assert tags["eks:eks-cluster-name"] == cluster and tags["team"] == "platform"
    for instance in mine:  # each claim's providerID, as the log recorded its launch, is its instance
        zone = instance["Placement"]["AvailabilityZone"]
        assert providers[instance["tags"]["karpenter.sh/nodeclaim"]] == f"aws:///{zone}/{instance['InstanceId']}"


async def _when(url: str, replacement: str, interrupted: str) -> tuple[datetime, datetime, dict[str, str]]:
    """When the log says the replacement launched and the interrupted claim terminated, and each
    launched claim's providerID."""
    from shared.store.eventstore import EventStore

    store = EventStore.connect(url)
    try:
        recorded = [r async for page in store.read_recorded(["NodeClaimLaunched", "NodeClaimTerminated"]) for r in page]
    finally:
        await store.close()
    seen = {(r.type, r.data["nodeclaim"]): r.occurred_at for r in recorded}
    providers = {r.data["nodeclaim"]: r.data["provider_id"] for r in recorded if r.type == "NodeClaimLaunched"}
    return seen[("NodeClaimLaunched", replacement)], seen[("NodeClaimTerminated", interrupted)], providers
