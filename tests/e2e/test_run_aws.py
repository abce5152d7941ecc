"""`nodewright run --cloud aws` against a moto server over HTTP: every service its own process,
EC2 in moto as the cloud. The scenario's account is made on moto, its EC2NodeClass resolves
Ready, the burst launches through CreateFleet, consolidation replaces a node, the audit is clean,
and at the end moto's running instances are exactly the run's live NodeClaims, each tagged as
upstream tags them, in a subnet the class resolved."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tests.aws import REGION, moto_url
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url

__all__ = ["moto_url"]

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
SCENARIO = ROOT / "examples/scenarios/aws-moto.yaml"
TYPES = {"m5.large", "m5.xlarge", "c5.large"}


def test_a_scenario_played_on_moto_keeps_the_promises_and_leaves_exactly_its_live_claims_running(
    tmp_path: Path, database_server_url: str, nats_server_url: str, moto_url: str
):
    cluster = f"aws{os.getpid()}"
    env = cli_environment(tmp_path, database_server_url, nats_server_url, cluster)
    env |= {
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "NODEWRIGHT_CLUSTER_NAME": cluster,
    }
    done = subprocess.run(
        [NODEWRIGHT, "run", str(SCENARIO), "--cloud", "aws", "--speed", "60", "-o", "json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout)
    asyncio.run(drop_run_log(run_log_url(database_server_url, summary["run"])))
    assert summary["audit_ok"] is True and summary["violations"] == [] and summary["over_limit"] == []
    assert summary["restarts"] == {} and summary["pending_pods_at_end"] == 0
    assert summary["disruptions"].get("Underutilized", 0) >= 1  # the burst's node replaced by a cheaper one
    ended = {t["nodeclaim"] for t in summary["terminations"]}

    ec2 = boto3.client(
        "ec2", endpoint_url=moto_url, region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t"
    )
    mine = [
        instance
        for reservation in ec2.describe_instances(
            Filters=[{"Name": "tag-key", "Values": [f"kubernetes.io/cluster/{cluster}"]}]
        )["Reservations"]
        for instance in reservation["Instances"]
    ]
    running = [i for i in mine if i["State"]["Name"] in ("pending", "running")]
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in running]
    assert len(running) == sum(summary["final_nodes"].values())  # exactly the live claims
    assert not {t["karpenter.sh/nodeclaim"] for t in tags} & ended
    gone = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in mine if i["State"]["Name"] == "terminated"]
    assert {t["karpenter.sh/nodeclaim"] for t in gone} == ended  # each ended claim's instance is terminated
    subnets = {s["SubnetId"] for s in ec2.describe_subnets()["Subnets"] if s["CidrBlock"].startswith("10.0.")}
    for instance, tag in zip(running, tags, strict=True):
        assert instance["InstanceType"] in TYPES and instance["SubnetId"] in subnets
        assert tag["karpenter.sh/nodepool"] == "general" and tag["karpenter.k8s.aws/ec2nodeclass"] == "default"
        assert tag["eks:eks-cluster-name"] == cluster and tag["team"] == "platform"
