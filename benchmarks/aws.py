"""AWS provider benchmark: launches through `AwsProvider` beside bare aiobotocore CreateFleet calls.

A moto server (a process of its own, so its work is not counted as the clients') holds a VPC
with a subnet per zone, a security group and an AMI per architecture. The provider uses the real
catalog (`AwsCatalog`: moto's DescribeInstanceTypes, offerings and spot prices) and launches N
claims one after another, each its creator's first ask (`firstAsk`, as the scheduler asks);
between them, alternating, a bare client sends the CreateFleet the provider sent for the same
claim shape (same template, same overrides) on one long-lived client.
Printed: the mean wall time per launch of each, their ratio (goal: within 1.5x) and the calls
the provider made per kind (DescribeInstanceTypes must be one per catalog refresh, not per launch).

Run: `python -m benchmarks.aws [--claims 1000]`; `--smoke`: 6 claims.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from aiobotocore.session import get_session

from shared.adapters.aws.catalog import AwsCatalog
from shared.adapters.aws.provider import AwsProvider, claim_filters
from shared.adapters.aws.session import AwsSettings, ClientFactory, client_factory
from shared.api.ec2nodeclass import EC2NodeClass
from shared.runtime.servers import free_tcp_port

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


class Counting:
    """A client factory that counts the provider's EC2 calls per operation."""

    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients
        self.calls: Counter[str] = Counter()
        self.fleets: list[dict[str, Any]] = []

    @asynccontextmanager
    async def __call__(self, service: str) -> AsyncIterator[Any]:
        async with self.clients(service) as client:
            client.meta.events.register(f"before-call.{service}", self._count)
            client.meta.events.register("before-parameter-build.ec2.CreateFleet", self._keep)
            yield client

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def _keep(self, params: dict[str, Any], **_: Any) -> None:
        self.fleets.append(dict(params))


class Classes:
    def __init__(self, node_class: EC2NodeClass) -> None:
        self.node_class = node_class

    async def get(self, name: str) -> EC2NodeClass | None:
        return self.node_class if name == self.node_class.name else None


def _moto(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1).close()
            return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("moto server did not start")


async def _world(clients: ClientFactory) -> EC2NodeClass:
    async with clients("ec2") as ec2:
        vpc = (await ec2.create_vpc(CidrBlock="10.0.0.0/16"))["Vpc"]["VpcId"]
        subnets = []
        for i, zone in enumerate(ZONES):
            answer = await ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i * 16}.0/20", AvailabilityZone=zone)
            subnets.append({"id": answer["Subnet"]["SubnetId"], "zone": zone})
        sg = (await ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc))["GroupId"]
        amis = []
        for arch, kube in (("x86_64", "amd64"), ("arm64", "arm64")):
            found = await ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "architecture", "Values": [arch]}])
            requirement = {"key": "kubernetes.io/arch", "operator": "In", "values": [kube]}
            amis.append({"id": found["Images"][0]["ImageId"], "requirements": [requirement]})
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-03-01T00:00:00Z"}
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole",
            },
            "status": {
                "subnets": subnets,
                "securityGroups": [{"id": sg}],
                "amis": amis,
                "instanceProfile": "KarpenterNodeInstanceProfile",
                "conditions": [ready],
            },
        }
    )


TYPES = [f"{family}.{size}" for family in ("m5", "c5", "r5") for size in ("large", "xlarge", "2xlarge", "4xlarge")]
"""The instance types a claim names, as the scheduler's do (it names up to 60)."""


def _spec(claim: str) -> dict[str, Any]:
    """A claim as the scheduler plans one: its instance types, amd64, two zones, spot or on-demand."""
    return {
        "nodeclaim": claim,
        "nodepool": "default",
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
        ],
        "requests": {"cpu": "1", "memory": "2Gi"},
        "labels": {"karpenter.sh/nodepool": "default"},
        "taints": [],
        "startupTaints": [],
    }


async def run(claims: int) -> None:
    port = free_tcp_port()
    server = _moto(port)
    try:
        session = get_session()
        session.set_credentials("bench", "bench")
        clients = client_factory(AwsSettings(REGION, f"http://127.0.0.1:{port}"), session)
        node_class = await _world(clients)
        counting = Counting(clients)
        catalog = AwsCatalog(counting, REGION, lambda: datetime.now(UTC))
        refreshes = _count_refreshes(catalog)
        provider = AwsProvider(counting, catalog, Classes(node_class), "bench", lambda: datetime.now(UTC))
        started = time.perf_counter()
        await provider.create(_spec("warm-0") | {"firstAsk": True})  # the catalog's refresh, the template: once
        warm = time.perf_counter() - started
        template = counting.fleets[-1]
        ours: list[float] = []
        bare: list[float] = []
        lookups: list[float] = []
        async with clients("ec2") as ec2:
            for i in range(claims):
                if i % 2 == 0:
                    at = time.perf_counter()
                    await provider.create(_spec(f"claim-{i:05d}") | {"firstAsk": True})  # as its creator asks
                    ours.append(time.perf_counter() - at)
                else:
                    request = {**template, "TagSpecifications": _tagged(template, f"claim-{i:05d}")}
                    request["ClientToken"] = f"bare-{i:05d}"
                    at = time.perf_counter()
                    answer = await ec2.create_fleet(**request)
                    bare.append(time.perf_counter() - at)
                    assert answer["Instances"], answer.get("Errors")
                    at = time.perf_counter()  # the lookup a create asked again pays first, bare
                    await ec2.describe_instances(Filters=claim_filters("bench", f"claim-{i:05d}"))
                    lookups.append(time.perf_counter() - at)
        await provider.close()
        per_ours, per_bare = _mean(ours), _mean(bare)
        print(f"claims: {claims} ({len(ours)} through the provider, {len(bare)} bare), alternating")
        print(f"first launch (catalog refresh + launch template): {warm * 1000:.0f} ms")
        print(f"provider: {per_ours * 1000:.1f} ms/launch; bare CreateFleet: {per_bare * 1000:.1f} ms/launch")
        print(f"overhead ratio provider / bare: {per_ours / per_bare:.2f}x (goal: within 1.5x)")
        per_lookup = _mean(lookups)
        print(
            f"bare DescribeInstances by the claim's tag (what a create asked again looks up first, not a first"
            f" ask): {per_lookup * 1000:.1f} ms"
        )
        print(
            f"DescribeInstanceTypes calls: {counting.calls['DescribeInstanceTypes']} for {refreshes['types']}"
            f" catalog refresh(es) over {claims + 1} launches"
        )
        print("provider calls: " + ", ".join(f"{k} {v}" for k, v in sorted(counting.calls.items())))
    finally:
        server.terminate()
        server.wait(timeout=10)


def _count_refreshes(catalog: AwsCatalog) -> Counter[str]:
    """Counts the catalog's instance-type refreshes (its own fetch, wrapped), so the benchmark
    prints how many it made rather than assuming one."""
    counted: Counter[str] = Counter()
    fetch = catalog._fetch_types

    async def fetch_counted() -> None:
        counted["types"] += 1
        await fetch()

    catalog._fetch_types = fetch_counted  # type: ignore[method-assign]
    return counted


def _tagged(template: dict[str, Any], claim: str) -> list[dict[str, Any]]:
    out = []
    for spec in template["TagSpecifications"]:
        tags = [
            t if t["Key"] not in ("karpenter.sh/nodeclaim", "Name") else {**t, "Value": claim} for t in spec["Tags"]
        ]
        out.append({**spec, "Tags": tags})
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="6 claims, the same code path")
    args = parser.parse_args()
    asyncio.run(run(6 if args.smoke else args.claims))
