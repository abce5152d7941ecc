"""A deleted EC2NodeClass leaves nothing behind in AWS (moto over HTTP): the watcher's nodeclass
controller, with the real resolver, resolves the example class (its `spec.role` profile made), the
provider launches with it (its launch template made); once the class is deleted, the templates
and the profile are gone, while another cluster's template of the same class name and a profile
the user gave as `spec.instanceProfile` stay. Through the sim's API, as the watcher's
ServiceAccount, the finalizer holds the class's deletion until no NodeClaim uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from services.sim.api.rbac import User
from services.watcher.nodeclasses import TERMINATION_FINALIZER, ClassWrites, NodeClassController, NodeClasses
from shared.adapters.aws.launch_templates import LaunchTemplates
from shared.adapters.aws.provider import AwsProvider
from shared.adapters.aws.resolver import NodeClassResolver
from shared.adapters.kube.cluster import NODECLAIMS, NODECLASSES
from shared.adapters.kube.rbac import rules_for
from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.launch_template import launch_config
from shared.ports.cluster import ADDED, DELETED, EC2NODECLASS, NODECLAIM, KubeEvent, WatchEvent
from tests.aws import REGION, moto_clients, moto_reset, moto_url
from tests.aws_launch import FixtureCatalog
from tests.aws_launch import NodeClasses as LaunchClasses
from tests.cluster_contract import new_world
from tests.integration.test_aws_nodeclass import K8S, NOW, Published, _example, _seed
from tests.integration.test_cluster_contract import connect, served_world

__all__ = ["moto_reset", "moto_url"]

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLUSTER = "my-cluster"


class Unheld:
    """Finalizer writes and Events for the cases that delete a class no finalizer held (made
    before it): recorded, nothing more."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.events: list[KubeEvent] = []

    async def record_event(self, event: KubeEvent) -> None:
        self.events.append(event)

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self.calls.append((kind, name, finalizer))

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self.calls.append((kind, name, finalizer))


def _controller(
    clients: Any, cluster: ClassWrites | None = None
) -> tuple[NodeClassController, NodeClasses, dict[str, dict[str, Any]]]:
    classes = NodeClasses()
    statuses: dict[str, dict[str, Any]] = {}

    async def patch(name: str, status: dict[str, Any]) -> None:
        statuses[name] = status

    async def record(facts: Any) -> None:
        return None

    resolver = NodeClassResolver(clients, cluster=CLUSTER, region=REGION, k8s_version=K8S)
    controller = NodeClassController(resolver, classes, patch, record, lambda: NOW, cluster=cluster or Unheld())
    return controller, classes, statuses


async def _resolved(controller: NodeClassController, classes: NodeClasses, document: dict[str, Any]) -> None:
    name = document["metadata"]["name"]
    classes.observe(WatchEvent(1, EC2NODECLASS, ADDED, name, document))
    await controller.reconcile(name)


async def _templates(clients: Any, cluster: str, nodeclass: str) -> list[str]:
    async with clients("ec2") as ec2:
        answer = await ec2.describe_launch_templates(
            Filters=[
                {"Name": "tag:eks:eks-cluster-name", "Values": [cluster]},
                {"Name": "tag:karpenter.k8s.aws/ec2nodeclass", "Values": [nodeclass]},
            ]
        )
    return [t["LaunchTemplateName"] for t in answer["LaunchTemplates"]]


async def _profile(clients: Any, name: str) -> dict[str, Any] | None:
    async with clients("iam") as iam:
        try:
            return (await iam.get_instance_profile(InstanceProfileName=name))["InstanceProfile"]
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "NoSuchEntity"
            return None


async def test_a_deleted_class_leaves_no_template_nor_profile(moto_url, moto_reset):
    clients = Published(moto_clients(moto_url), {})
    await _seed(clients)
    controller, classes, statuses = _controller(clients)
    document = _example().model_dump(by_alias=True, exclude_none=True)
    await _resolved(controller, classes, document)
    launched = EC2NodeClass.model_validate({**document, "status": statuses["default"]})
    profile = launched.status.instance_profile if launched.status else None
    assert profile and await _profile(clients, profile) is not None

    provider = AwsProvider(clients, FixtureCatalog(), LaunchClasses(launched), CLUSTER, lambda: NOW)
    try:
        await provider.create(
            {
                "nodeclaim": "default-a1",
                "nodepool": "default",
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "labels": {"karpenter.sh/nodepool": "default"},
                "taints": [],
                "startupTaints": [],
            }
        )
    finally:
        await provider.close()
    ami = launched.status.amis[0].id if launched.status and launched.status.amis else ""
    other = await LaunchTemplates(clients).ensure(launch_config(launched, "other-cluster", ami))
    ours = await _templates(clients, CLUSTER, "default")
    assert ours and other not in ours

    classes.observe(WatchEvent(2, EC2NODECLASS, DELETED, "default", document))
    await controller.reconcile("default")

    assert await _templates(clients, CLUSTER, "default") == []
    assert await _profile(clients, profile) is None
    assert await _templates(clients, "other-cluster", "default") == [other]  # another cluster's
    async with clients("iam") as iam:  # the role is the user's: only taken out of the profile
        await iam.get_role(RoleName="KarpenterNodeRole-my-cluster")
    again = await NodeClassResolver(clients, cluster=CLUSTER, region=REGION, k8s_version=K8S).clean_up("default")
    assert (again.profiles, again.templates) == ((), ())  # nothing left: a second pass deletes nothing


async def test_a_retry_after_a_partial_failure_finishes_the_job(moto_url, moto_reset):
    """A pass that took the role out and then failed: the next deletes the empty profile."""
    clients = Published(moto_clients(moto_url), {})
    await _seed(clients)
    controller, classes, statuses = _controller(clients)
    document = _example().model_dump(by_alias=True, exclude_none=True)
    await _resolved(controller, classes, document)
    profile = statuses["default"]["instanceProfile"]
    async with clients("iam") as iam:
        await iam.remove_role_from_instance_profile(
            InstanceProfileName=profile, RoleName="KarpenterNodeRole-my-cluster"
        )
    classes.observe(WatchEvent(2, EC2NODECLASS, DELETED, "default", {}))  # its uid not known: by path and tags
    await controller.reconcile("default")
    assert await _profile(clients, profile) is None
    assert classes.cleaned == {"default"}


async def test_a_profile_the_user_gave_is_kept(moto_url, moto_reset):
    clients = Published(moto_clients(moto_url), {})
    await _seed(clients)
    async with clients("iam") as iam:
        await iam.create_instance_profile(InstanceProfileName="UserProfile")
        await iam.add_role_to_instance_profile(
            InstanceProfileName="UserProfile", RoleName="KarpenterNodeRole-my-cluster"
        )
    controller, classes, statuses = _controller(clients)
    document = _example().model_dump(by_alias=True, exclude_none=True)
    del document["spec"]["role"]
    document["spec"]["instanceProfile"] = "UserProfile"
    await _resolved(controller, classes, document)
    given = EC2NodeClass.model_validate({**document, "status": statuses["default"]})
    assert given.status is not None and given.status.instance_profile == "UserProfile" and given.status.amis
    await LaunchTemplates(clients).ensure(launch_config(given, CLUSTER, given.status.amis[0].id))
    assert await _templates(clients, CLUSTER, "default")

    classes.observe(WatchEvent(2, EC2NODECLASS, DELETED, "default", document))
    await controller.reconcile("default")

    assert await _templates(clients, CLUSTER, "default") == []
    kept = await _profile(clients, "UserProfile")
    assert kept is not None and [r["RoleName"] for r in kept["Roles"]] == ["KarpenterNodeRole-my-cluster"]


async def test_a_deleted_class_stays_terminating_until_its_nodeclaims_are_gone(
    moto_url: str, moto_reset: None, tmp_path: Path
) -> None:
    """`kubectl delete ec2nodeclass default` while a NodeClaim names it: the class stays,
    terminating, with its profile and launch template; the claim gone, they are deleted, the
    finalizer removed, and the API lets the class go. The watcher writes as its ServiceAccount's
    rules allow (`rules_for("watcher")`), so a request beyond them would be refused here."""
    clients = Published(moto_clients(moto_url), {})
    await _seed(clients)
    world = new_world()
    document = _example().model_dump(by_alias=True, exclude_none=True)
    del document["metadata"]["uid"]  # the API's own
    world.cluster.create_custom(EC2NODECLASS, document, world.now)
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    claim = {"apiVersion": "karpenter.sh/v1", "kind": NODECLAIM, "metadata": {"name": "default-a1"}}
    world.cluster.create_custom(NODECLAIM, {**claim, "spec": {"nodeClassRef": ref}}, world.now)
    users = [User(name="watcher", token="t-w", rules=rules_for("watcher")), User(name="admin", token="t-a")]
    server, _ = await served_world(world, users)  # type: ignore[arg-type]
    watcher = await connect(server, tmp_path, "watcher", "t-w")
    admin = await connect(server, tmp_path, "admin", "t-a")  # what kubectl is
    try:
        controller, classes, statuses = _controller(clients, watcher)

        async def listed() -> None:
            for change in (await watcher.snapshot()).objects:
                classes.observe(change)
                classes.observe_claim(change)

        await listed()
        await controller.reconcile("default")
        assert world.cluster.ec2nodeclasses["default"]["metadata"]["finalizers"] == [TERMINATION_FINALIZER]
        resolved = EC2NodeClass.model_validate(
            {**world.cluster.ec2nodeclasses["default"], "status": statuses["default"]}
        )
        profile = statuses["default"]["instanceProfile"]
        assert resolved.status is not None and resolved.status.amis and await _profile(clients, profile)
        await LaunchTemplates(clients).ensure(launch_config(resolved, CLUSTER, resolved.status.amis[0].id))

        await admin.api.call("DELETE", f"{NODECLASSES}/default")
        await listed()
        await controller.reconcile("default")
        held = world.cluster.ec2nodeclasses["default"]["metadata"]
        assert held["deletionTimestamp"] and held["finalizers"] == [TERMINATION_FINALIZER]
        assert await _templates(clients, CLUSTER, "default") and await _profile(clients, profile) is not None
        assert classes.readiness("default") == (False, "NodeClassTerminating", "NodeClass is Terminating")
        said = [e for e in world.cluster.events.values() if e["reason"] == "WaitingOnNodeClaimTermination"]
        assert [(e["type"], e["message"], e["involvedObject"]["kind"]) for e in said] == [
            ("Normal", "Waiting on NodeClaim termination for default-a1", "EC2NodeClass")
        ]
        assert said[0]["involvedObject"]["uid"] == held["uid"]

        await admin.api.call("DELETE", f"{NODECLAIMS}/default-a1")
        assert classes.observe_claim(WatchEvent(0, NODECLAIM, DELETED, "default-a1", {})) == "default"
        await controller.reconcile("default")
        assert "default" not in world.cluster.ec2nodeclasses
        assert await _templates(clients, CLUSTER, "default") == []
        assert await _profile(clients, profile) is None
    finally:
        await watcher.close()
        await admin.close()
        await server.stop()
