"""The EC2NodeClass resolver against moto over HTTP: the example class resolved from a seeded VPC
(tagged subnets in two zones, security groups, an AMI per architecture behind the alias's SSM
parameters, the node role), and a selector matching nothing leaving SubnetsReady False.

moto holds none of the EKS-optimized AMI parameters AWS publishes under /aws/service/eks and
refuses to write under /aws/ (a reserved prefix), so `Published` answers GetParameter for those
names in place of the call (a botocore before-call hook), as AWS would; the AMI they name is one
of moto's own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from shared.adapters.aws.resolver import NodeClassResolver
from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.nodeclass import alias_parameters
from tests.aws import REGION, Recording, moto_clients, moto_reset, moto_url

__all__ = ["moto_reset", "moto_url"]

pytestmark = pytest.mark.asyncio(loop_scope="module")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nodeclasses" / "default.yaml"
K8S = "1.32"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
MOTO_AL2023 = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
DISCOVERY = {"Key": "karpenter.sh/discovery", "Value": "my-cluster"}


class Published:
    """A client factory whose SSM answers GetParameter for `values` itself (the rest goes to moto)."""

    def __init__(self, clients: Any, values: dict[str, str]) -> None:
        self.clients, self.values = clients, values

    @asynccontextmanager
    async def __call__(self, service: str) -> AsyncIterator[Any]:
        async with self.clients(service) as client:
            if service == "ssm":
                client.meta.events.register("before-call.ssm.GetParameter", self._answer)
            yield client

    def _answer(self, params: dict[str, Any], **_: Any) -> Any:
        name = json.loads(params["body"] or b"{}").get("Name")
        if name not in self.values:
            return None
        answer = {"Parameter": {"Name": name, "Type": "String", "Value": self.values[name], "Version": 1}}
        return SimpleNamespace(status_code=200, headers={}), answer


def _example() -> EC2NodeClass:
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    document["metadata"]["uid"] = "0f6e9d7c-uid"
    return EC2NodeClass.model_validate(document)


async def _seed(clients: Published) -> dict[str, object]:
    async with clients("ec2") as ec2:
        vpc = (await ec2.create_vpc(CidrBlock="10.0.0.0/16"))["Vpc"]["VpcId"]
        subnets = []
        for cidr, zone in (("10.0.1.0/24", "us-east-1a"), ("10.0.2.0/25", "us-east-1b")):
            subnet = (await ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone))["Subnet"]
            await ec2.create_tags(Resources=[subnet["SubnetId"]], Tags=[DISCOVERY])
            subnets.append(subnet["SubnetId"])
        await ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.3.0/24", AvailabilityZone="us-east-1c")  # untagged
        group = (await ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc))["GroupId"]
        await ec2.create_tags(Resources=[group], Tags=[DISCOVERY])
        await ec2.create_security_group(GroupName="other", Description="other", VpcId=vpc)
    async with clients("ssm") as ssm:  # an x86_64 AMI moto holds, named by a parameter it holds
        image = (await ssm.get_parameter(Name=MOTO_AL2023))["Parameter"]["Value"]
    clients.values[alias_parameters("al2023@latest", K8S)[0]] = image  # arm64's is not published here
    async with clients("iam") as iam:
        await iam.create_role(RoleName="KarpenterNodeRole-my-cluster", AssumeRolePolicyDocument="{}")
    return {"subnets": subnets, "group": group, "image": image}


async def test_the_example_nodeclass_resolves_from_ec2_ssm_and_iam(moto_url, moto_reset):
    clients = Recording(Published(moto_clients(moto_url), {}))
    seeded = await _seed(clients.clients)
    resolver = NodeClassResolver(clients, cluster="my-cluster", region=REGION, k8s_version=K8S)
    out = await resolver.resolve(_example(), NOW)
    assert out.ready, out.status["conditions"]
    assert out.subnets == tuple(seeded["subnets"])  # the /24's free IPs before the /25's
    assert [s["zone"] for s in out.status["subnets"]] == ["us-east-1a", "us-east-1b"]
    assert out.security_groups == (seeded["group"],)
    assert out.status["securityGroups"] == [{"id": seeded["group"], "name": "nodes"}]
    assert out.amis == (seeded["image"],)
    assert out.status["amis"][0]["requirements"] == [  # the alias's standard variant: no GPU, no accelerator
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "DoesNotExist"},
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"},
    ]
    profile = out.status["instanceProfile"]
    assert profile.startswith("my-cluster_")
    async with clients("iam") as iam:
        held = (await iam.get_instance_profile(InstanceProfileName=profile))["InstanceProfile"]
    assert [r["RoleName"] for r in held["Roles"]] == ["KarpenterNodeRole-my-cluster"]
    again = await resolver.resolve(_example(), NOW, out.status["conditions"])
    assert again.status == out.status  # found again, not made twice
    assert clients.calls["CreateInstanceProfile"] == 1


async def test_a_selector_matching_nothing_is_not_ready_saying_why(moto_url, moto_reset):
    clients = Published(moto_clients(moto_url), {})
    await _seed(clients)
    document = _example().model_dump(by_alias=True, exclude_none=True)
    document["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "another-cluster"}}]
    document["spec"]["role"] = "NoSuchRole"
    resolver = NodeClassResolver(clients, cluster="my-cluster", region=REGION, k8s_version=K8S)
    out = await resolver.resolve(EC2NodeClass.model_validate(document), NOW)
    conditions = {c["type"]: c for c in out.status["conditions"]}
    assert conditions["SubnetsReady"]["status"] == "False"
    assert conditions["SubnetsReady"]["reason"] == "SubnetsNotFound"
    assert conditions["SubnetsReady"]["message"] == "SubnetSelector did not match any Subnets"
    assert conditions["InstanceProfileReady"]["status"] == "False"
    assert conditions["Ready"]["status"] == "False" and not out.ready
    assert out.status["subnets"] is None
