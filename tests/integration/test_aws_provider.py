"""The AWS provider against moto's EC2 over HTTP: a burst of claims launched with upstream's tags
and cheapest-first overrides, prioritized launches (NodeOverlays), capacity errors, idempotent creates, list and delete, leaked
instances collected.

moto is simpler than EC2: its CreateFleet always launches, taking the first override and ignoring
priorities and allocation strategies, and never runs out of capacity. So the tests assert on the
request the provider sends (a botocore hook records it), and inject capacity errors by rewriting
moto's fleet answer (`Recording.rewrite`). The catalog is a small fixture (tests/aws_launch.py):
what matters here is the launch path, not moto's 1,400 types.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_asyncio
from aiobotocore.session import get_session

from services.scheduler.garbage import LEAK_GRACE, GarbageCollection
from shared.adapters.aws.provider import AwsProvider
from shared.adapters.aws.session import AwsSettings, client_factory
from shared.api.ec2nodeclass import EC2NodeClass
from shared.api.quantity import parse
from shared.ports.cloud import CloudError, InstanceNotFound, InsufficientCapacityError
from tests.aws import REGION, Recording, moto_clients, moto_url
from tests.aws_launch import ZONES, FixtureCatalog, NodeClasses, node_class

__all__ = ["moto_url"]

pytestmark = pytest.mark.asyncio(loop_scope="module")

NOW = datetime(2026, 3, 1, tzinfo=UTC)


class Sent(Recording):
    """A Recording that also keeps each CreateFleet request's parameters, as the provider gave them."""

    def __init__(self, clients: Any) -> None:
        super().__init__(clients)
        self.fleets: list[dict[str, Any]] = []

    @asynccontextmanager
    async def __call__(self, service: str) -> AsyncIterator[Any]:
        async with super().__call__(service) as client:
            client.meta.events.register("before-parameter-build.ec2.CreateFleet", self._keep)
            yield client

    def _keep(self, params: dict[str, Any], **_: Any) -> None:
        self.fleets.append(copy.deepcopy(params))


async def _world(clients: Any) -> dict[str, Any]:
    """A VPC with a subnet per zone, a security group and an AMI per architecture, in moto."""
    async with clients("ec2") as ec2:
        vpc = (await ec2.create_vpc(CidrBlock="10.0.0.0/16"))["Vpc"]["VpcId"]
        subnets = {}
        for i, zone in enumerate(ZONES):
            answer = await ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone)
            subnets[zone] = answer["Subnet"]["SubnetId"]
        sg = (await ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc))["GroupId"]
        amis = []
        for arch in ("x86_64", "arm64"):
            found = await ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "architecture", "Values": [arch]}])
            amis.append(found["Images"][0]["ImageId"])
        amd, arm = amis
    return {"subnets": subnets, "sg": sg, "amis": ((amd, "amd64"), (arm, "arm64"))}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(moto_url):
    """One VPC for the module: moto's first call after a reset loads its AMIs (about 2 s), so
    tests do not reset it; each test is a cluster of its own instead (`aws`)."""
    return await _world(moto_clients(moto_url))


@pytest_asyncio.fixture(loop_scope="module")
async def aws(moto_url, world, request):
    """A provider for a cluster named after the test: it sees only that cluster's instances."""
    clients = Sent(moto_clients(moto_url))
    nc = node_class(subnets=world["subnets"], security_groups=(world["sg"],), amis=world["amis"])
    cluster = request.node.name.removeprefix("test_")[:40]
    provider = AwsProvider(clients, FixtureCatalog(), NodeClasses(nc), cluster, lambda: NOW)
    yield provider, clients, world
    await provider.close()


def spec(claim: str, *requirements: dict[str, Any], pool: str = "default", node_class: str = "default") -> dict:
    return {
        "nodeclaim": claim,
        "nodepool": pool,
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
        "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool]}, *requirements],
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "labels": {"karpenter.sh/nodepool": pool},
        "taints": [],
        "startupTaints": [],
    }


async def _instances(provider: AwsProvider) -> list[dict[str, Any]]:
    """Every instance of the provider's cluster, in any state."""
    async with provider.clients("ec2") as ec2:
        answer = await ec2.describe_instances(
            Filters=[{"Name": "tag:eks:eks-cluster-name", "Values": [provider.cluster]}]
        )
    return [i for r in answer["Reservations"] for i in r["Instances"]]


async def test_a_burst_launches_tagged_instances_in_the_chosen_zones(aws):
    provider, clients, world = aws
    zones = ["us-east-1a", "us-east-1b"]
    wanted = [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    ]
    views = await asyncio.gather(*(provider.create(spec(f"default-{i:03d}", *wanted)) for i in range(12)))
    instances = {i["InstanceId"]: i for i in await _instances(provider)}
    assert len(instances) == 12
    for view in views:
        instance_id = view["providerID"].rsplit("/", 1)[1]
        raw = instances[instance_id]
        tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
        assert tags["karpenter.sh/nodeclaim"] == view["nodeclaim"]
        assert tags["karpenter.sh/nodepool"] == "default"
        assert tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
        assert tags[f"kubernetes.io/cluster/{provider.cluster}"] == "owned"
        assert tags["eks:eks-cluster-name"] == provider.cluster
        assert tags["Name"] == view["nodeclaim"] and tags["team"] == "platform"
        assert raw["InstanceType"] in {"m5.large", "t3.micro"}
        assert raw["SubnetId"] == world["subnets"][raw["Placement"]["AvailabilityZone"]]
        assert view["providerID"] == f"aws:///{raw['Placement']['AvailabilityZone']}/{instance_id}"
        assert view["zone"] in zones and view["instanceType"] == raw["InstanceType"]
        assert view["allocatable"]["cpu"] and view["labels"]["karpenter.sh/nodepool"] == "default"
    assert clients.calls["CreateFleet"] == 12
    assert clients.calls["CreateLaunchTemplate"] == 1  # one configuration (one AMI): one template


async def test_the_request_orders_overrides_cheapest_first(aws):
    provider, clients, _ = aws
    await provider.create(spec("default-a"))
    request = clients.fleets[-1]
    assert request["Type"] == "instant"
    assert request["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    overrides = [o for c in request["LaunchTemplateConfigs"] for o in c["Overrides"]]
    prices = [o["Priority"] for c in request["LaunchTemplateConfigs"] for o in c["Overrides"]]
    assert len(request["LaunchTemplateConfigs"]) == 2  # an amd64 and an arm64 AMI
    for config in request["LaunchTemplateConfigs"]:
        priorities = [o["Priority"] for o in config["Overrides"]]
        assert priorities == sorted(priorities)
    assert min(prices) == next(o["Priority"] for o in overrides if o["InstanceType"] == "t3.micro")
    on_demand = spec("default-b", {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]})
    await provider.create(on_demand)
    assert clients.fleets[-1]["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}


@pytest.mark.parametrize(
    ("capacity", "prioritized", "options", "strategy", "launched"),
    [
        ("on-demand", ["c6g.xlarge", "m5.large", "t3.micro"], "OnDemandOptions", "prioritized", "c6g.xlarge"),
        ("spot", ["m5.large", "t3.micro"], "SpotOptions", "capacity-optimized-prioritized", "m5.large"),
        ("on-demand", [], "OnDemandOptions", "lowest-price", "t3.micro"),
    ],
    ids=["on-demand", "spot", "not-prioritized"],
)
async def test_a_prioritized_launch_asks_a_prioritized_fleet_and_gets_its_first_type(
    aws, capacity, prioritized, options, strategy, launched
):
    """A claim planned under NodeOverlays (`prioritized`) asks EC2 Fleet for a prioritized
    strategy, each override's Priority its type's rank, so the first type is launched though
    EC2 prices it dearer; without the list, cheapest first as before.

    moto accepts both strategies and the priorities but reads neither: it launches the first
    override of the first launch template. So this asserts the request moto received (its
    strategy and priorities, recorded by a botocore hook), that moto took it, and the instance
    it launched, which is the first-priority type only because the provider also orders the
    overrides by rank."""
    provider, clients, _ = aws
    wanted = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]}
    ask = spec(f"default-{capacity}-{len(prioritized)}", wanted)
    if prioritized:
        ask["prioritized"] = prioritized
        ask["requirements"].append({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": prioritized})
    view = await provider.create(ask)
    request = clients.fleets[-1]
    assert request[options] == {"AllocationStrategy": strategy}
    overrides = [o for c in request["LaunchTemplateConfigs"] for o in c["Overrides"]]
    if prioritized:
        rank = {name: i for i, name in enumerate(prioritized)}
        assert {o["InstanceType"] for o in overrides} == set(prioritized)
        assert all(o["Priority"] == rank[o["InstanceType"]] for o in overrides)
        assert len(overrides) == 3 * len(prioritized)  # a subnet per zone: every zone of a type ties
    (raw,) = [i for i in await _instances(provider) if i["InstanceId"] == view["providerID"].rsplit("/", 1)[1]]
    assert view["instanceType"] == raw["InstanceType"] == launched
    assert view["capacityType"] == capacity


async def test_a_prioritized_launch_falls_to_the_next_type_when_the_first_is_short(aws):
    """The first type's offerings in the insufficient-capacity cache (`unavailable`) are left
    out, so the next rank is launched; its Priority keeps its rank in the list (1), which EC2
    reads only relative to the others."""
    provider, clients, _ = aws
    ask = spec("default-short-first", {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]})
    ask["prioritized"] = ["m5.large", "c6g.xlarge", "t3.micro"]
    ask["unavailable"] = [["m5.large", zone, "spot"] for zone in ZONES]
    view = await provider.create(ask)
    overrides = [o for c in clients.fleets[-1]["LaunchTemplateConfigs"] for o in c["Overrides"]]
    assert "m5.large" not in {o["InstanceType"] for o in overrides}
    assert min(o["Priority"] for o in overrides) == 1
    assert view["instanceType"] == "c6g.xlarge"


async def test_a_capacity_error_names_the_offerings_refused(aws):
    provider, clients, _ = aws

    def short(parsed: dict[str, Any]) -> None:
        overrides = {"InstanceType": "t3.micro", "AvailabilityZone": "us-east-1a", "SubnetId": "subnet-x"}
        parsed["Instances"] = []
        parsed["Errors"] = [
            {
                "ErrorCode": "InsufficientInstanceCapacity",
                "ErrorMessage": "We currently do not have sufficient t3.micro capacity",
                "Lifecycle": "spot",
                "LaunchTemplateAndOverrides": {"Overrides": overrides},
            }
        ]

    clients.rewrite["CreateFleet"] = short
    with pytest.raises(InsufficientCapacityError, match=r"t3\.micro/us-east-1a/spot") as caught:
        await provider.create(spec("default-short"))
    assert caught.value.offerings == (("t3.micro", "us-east-1a", "spot"),)
    clients.rewrite["CreateFleet"] = lambda parsed: parsed.update(
        Instances=[], Errors=[{"ErrorCode": "InvalidParameterValue", "ErrorMessage": "bad"}]
    )
    with pytest.raises(CloudError, match="InvalidParameterValue") as other:
        await provider.create(spec("default-bad"))
    assert not isinstance(other.value, InsufficientCapacityError)

    def partly(parsed: dict[str, Any]) -> None:  # moto's instance kept, after a refusal on the way
        refusal: dict[str, Any] = {}
        short(refusal)
        parsed["Errors"] = refusal["Errors"]

    clients.rewrite["CreateFleet"] = partly
    view = await provider.create(spec("default-partly"))
    assert view["providerID"].startswith("aws:///")  # the instance moto launched is the claim's
    assert view["refused"] == [["t3.micro", "us-east-1a", "spot"]]  # for the scheduler's cache
    clients.rewrite.pop("CreateFleet")
    assert "refused" not in await provider.create(spec("default-whole"))


async def test_create_twice_for_one_claim_gives_one_instance(aws):
    provider, clients, _ = aws
    first = await provider.create(spec("default-once"))
    again, third = await asyncio.gather(provider.create(spec("default-once")), provider.create(spec("default-once")))
    assert first["providerID"] == again["providerID"] == third["providerID"]
    assert len(await _instances(provider)) == 1
    assert clients.calls["CreateFleet"] == 1


async def test_list_and_delete(aws):
    provider, _, _ = aws
    views = [await provider.create(spec(f"default-{i}")) for i in range(3)]
    listed = await provider.list()
    assert {v["providerID"] for v in listed} == {v["providerID"] for v in views}
    assert {v["nodeclaim"] for v in listed} == {"default-0", "default-1", "default-2"}
    gone = await provider.delete(views[0]["providerID"])
    assert gone["state"] == "shutting-down" and gone["nodeclaim"] == "default-0"
    assert {v["nodeclaim"] for v in await provider.list()} == {"default-1", "default-2"}
    with pytest.raises(InstanceNotFound):
        await provider.delete(views[0]["providerID"])
    with pytest.raises(InstanceNotFound):
        await provider.delete("aws:///us-east-1a/i-0000000000000000f")


async def test_a_class_not_ready_or_missing_is_named(aws, moto_url):
    provider, _, _ = aws
    with pytest.raises(CloudError, match="EC2NodeClass gpu not found"):
        await provider.create(spec("default-x", node_class="gpu"))
    provider.node_classes = NodeClasses(node_class(ready=False))
    with pytest.raises(CloudError, match=r"EC2NodeClass default is not Ready \(SubnetsNotFound"):
        await provider.create(spec("default-x"))


async def test_credentials_are_never_logged(aws, moto_url, caplog):
    _, _, world = aws
    session = get_session()
    session.set_credentials("AKIASECRETKEYID00001", "s3cr3t-access-key-value")
    clients = client_factory(AwsSettings(REGION, moto_url), session)
    nc = node_class(subnets=world["subnets"], security_groups=(world["sg"],), amis=world["amis"])
    provider = AwsProvider(clients, FixtureCatalog(), NodeClasses(nc), "logged", lambda: NOW)
    with caplog.at_level(logging.DEBUG, logger="nodewright"):
        await provider.create(spec("default-logged"))
        await provider.create(spec("default-logged"))
        await provider.delete((await provider.list())[0]["providerID"])
    await provider.close()
    said = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("nodewright"))
    assert "default-logged" in said  # the provider did log its steps
    assert "AKIASECRETKEYID00001" not in said and "s3cr3t-access-key-value" not in said


async def test_a_leaked_instance_is_terminated_and_another_clusters_left(aws, moto_url, world):
    provider, _, _ = aws
    nc = node_class(subnets=world["subnets"], security_groups=(world["sg"],), amis=world["amis"])
    other = AwsProvider(moto_clients(moto_url), FixtureCatalog(), NodeClasses(nc), "another", lambda: NOW)
    held = await provider.create(spec("default-held"))
    lost = await provider.create(spec("default-lost"))
    theirs = await other.create(spec("default-theirs"))
    (raw,) = [i for i in await _instances(provider) if i["InstanceId"] == held["providerID"].rsplit("/", 1)[1]]
    async with provider.clients("ec2") as ec2:  # a second instance tagged with the held claim
        answer = await ec2.run_instances(
            ImageId=raw["ImageId"],
            InstanceType=raw["InstanceType"],
            MinCount=1,
            MaxCount=1,
            SubnetId=raw["SubnetId"],
            TagSpecifications=[{"ResourceType": "instance", "Tags": raw["Tags"]}],
        )
    second = f"aws:///{raw['Placement']['AvailabilityZone']}/{answer['Instances'][0]['InstanceId']}"
    projection = SimpleNamespace(
        claims={"default-held": SimpleNamespace(provider_id=held["providerID"])}, orphaned=list
    )
    gc = GarbageCollection(None, projection, provider, None, NOW)  # type: ignore[arg-type]  # only these are used
    later = datetime.now(UTC) + LEAK_GRACE  # moto stamps LaunchTime with the wall clock
    assert sorted(await gc.terminate_leaked(await provider.list(), later)) == sorted([lost["providerID"], second])
    assert [v["providerID"] for v in await provider.list()] == [held["providerID"]]
    assert [v["providerID"] for v in await other.list()] == [theirs["providerID"]]
    await other.close()


async def test_a_first_ask_skips_the_lookup_and_the_launch_says_what_it_was_made_with(aws):
    """The claim's creator asks once (`firstAsk`): no DescribeInstances before CreateFleet, whose
    ClientToken makes a repeat harmless on EC2. The view carries the AMI, subnet and security
    groups (drift compares them with the class) and none of them when asked without firstAsk."""
    provider, clients, world = aws
    before = clients.calls["DescribeInstances"]
    view = await provider.create(spec("default-first") | {"firstAsk": True})
    assert clients.calls["DescribeInstances"] == before  # no lookup
    (request,) = clients.fleets
    assert len(request["ClientToken"]) == 64
    assert view["subnetID"] == world["subnets"][view["zone"]]
    assert view["securityGroupIDs"] == [world["sg"]]
    assert view["imageID"] in {ami for ami, _ in world["amis"]}
    again = await provider.create(spec("default-first"))  # not a first ask: found by its tag
    assert clients.calls["DescribeInstances"] == before + 1 and again["providerID"] == view["providerID"]
    assert len(clients.fleets) == 1


async def test_the_launched_node_offers_what_its_classes_kubelet_leaves(aws):
    """maxPods and kubeReserved of the class change what the instance offers its pods."""
    provider, clients, world = aws
    plain = node_class(subnets=world["subnets"], security_groups=(world["sg"],), amis=world["amis"])
    document = plain.model_dump(by_alias=True, exclude_none=True, mode="json")
    document["spec"]["kubelet"] = {"maxPods": 20, "kubeReserved": {"cpu": "500m"}}
    tuned = EC2NodeClass.model_validate(document)
    wanted = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
    views, planned = [], []
    for nc, claim in ((plain, "default-plain"), (tuned, "default-tuned")):
        launcher = AwsProvider(clients, FixtureCatalog(), NodeClasses(nc), provider.cluster, lambda: NOW)
        views.append(await launcher.create(spec(claim, wanted)))
        planned.append({t["name"]: t["allocatable"]["pods"] for t in await launcher.instance_types("default")})
        await launcher.close()
    assert views[0]["allocatable"]["pods"] == "29"  # m5.large's ENIs: 3 * (10 - 1) + 2
    assert views[1]["allocatable"]["pods"] == "20"
    assert parse(views[1]["allocatable"]["cpu"]) == parse("1500m")  # 2 cpus less the 500m reserved
    # what the scheduler plans a pool on the class with is what its instances offer
    assert planned[0]["m5.large"] == "29" and set(planned[1].values()) == {"20"}
    assert {t["name"]: t["allocatable"]["pods"] for t in await provider.instance_types()}["m5.large"] == "29"
    with pytest.raises(CloudError, match="EC2NodeClass missing not found"):
        await provider.instance_types("missing")
