"""`NodeClassResolver`: asks EC2, SSM and IAM what an EC2NodeClass's selectors match, and hands
the answers to the pure core (`shared.aws.nodeclass.resolve`) for the class's status.

As upstream's providers do: one DescribeSubnets / DescribeSecurityGroups per filter set (matches
merged by id), the alias's SSM parameters (a missing one is skipped), DescribeImages of available
images, deprecated ones included; and, for `spec.role`, an instance profile of its own holding
that role, made once (found again by its name, fixed by the class's uid) and tagged as upstream
tags it. A failed call is a `CloudError` naming the call; the class is resolved again later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from shared.adapters.aws.cleanup import Cleaned, NodeClassCleanup
from shared.adapters.aws.session import ClientFactory
from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws import nodeclass as core
from shared.aws.cleanup import profile_path
from shared.ports.cloud import CloudError

DISCOVERED_TAG = "karpenter.k8s.aws/ec2nodeclass"
CLUSTER_NAME_TAG = "eks:eks-cluster-name"


def _filters(filters: Sequence[core.Filter]) -> list[dict[str, Any]]:
    return [{"Name": name, "Values": list(values)} for name, values in filters]


class NodeClassResolver:
    def __init__(self, clients: ClientFactory, *, cluster: str, region: str, k8s_version: str) -> None:
        self.clients, self.cluster, self.region, self.k8s_version = clients, cluster, region, k8s_version
        self.cleanup = NodeClassCleanup(clients, cluster=cluster, region=region)

    async def clean_up(self, nodeclass: str, uid: str | None = None) -> Cleaned:
        """A deleted class's launch templates and `spec.role` profile deleted (`NodeClassCleanup`)."""
        return await self.cleanup.clean_up(nodeclass, uid)

    async def resolve(
        self, nodeclass: EC2NodeClass, now: datetime, previous: Sequence[Mapping[str, Any]] = ()
    ) -> core.Resolution:
        return core.resolve(nodeclass, await self.find(nodeclass), now, previous)

    async def find(self, nodeclass: EC2NodeClass) -> core.Found:
        spec = nodeclass.spec
        try:
            async with self.clients("ec2") as ec2:
                subnets = await self._subnets(ec2, core.subnet_filter_sets(spec))
                groups = await self._security_groups(ec2, core.security_group_filter_sets(spec))
                ami_error = ""
                try:
                    images = await self._images(ec2, nodeclass)
                except core.UnsupportedAlias as exc:
                    images, ami_error = [], str(exc)
            profile, profile_error = await self._instance_profile(nodeclass)
        except (ClientError, BotoCoreError) as exc:
            raise CloudError(f"resolving EC2NodeClass {nodeclass.name!r}: {exc}") from exc
        return core.Found(subnets, groups, images, profile, profile_error, ami_error)

    async def _subnets(self, ec2: Any, filter_sets: list[list[core.Filter]]) -> list[core.FoundSubnet]:
        found: dict[str, core.FoundSubnet] = {}
        for filters in filter_sets:
            async for page in ec2.get_paginator("describe_subnets").paginate(Filters=_filters(filters)):
                for s in page.get("Subnets", []):
                    found[s["SubnetId"]] = core.FoundSubnet(
                        s["SubnetId"],
                        s["AvailabilityZone"],
                        s.get("AvailabilityZoneId", ""),
                        s["AvailableIpAddressCount"],
                    )
        return list(found.values())

    async def _security_groups(self, ec2: Any, filter_sets: list[list[core.Filter]]) -> list[core.FoundSecurityGroup]:
        found: dict[str, core.FoundSecurityGroup] = {}
        for filters in filter_sets:
            async for page in ec2.get_paginator("describe_security_groups").paginate(Filters=_filters(filters)):
                for g in page.get("SecurityGroups", []):
                    found[g["GroupId"]] = core.FoundSecurityGroup(g["GroupId"], g.get("GroupName", ""))
        return list(found.values())

    async def _images(self, ec2: Any, nodeclass: EC2NodeClass) -> list[core.FoundImage]:
        values = await self._parameters(core.parameters_wanted(nodeclass.spec, self.k8s_version))
        variants = core.image_variants(nodeclass.spec, self.k8s_version, values)
        found: dict[str, core.FoundImage] = {}
        for query in core.image_queries(nodeclass.spec, values):
            params: dict[str, Any] = {
                "Filters": [*_filters(query.filters), {"Name": "state", "Values": ["available"]}],
                "IncludeDeprecated": True,
            }
            if query.owners:
                params["Owners"] = list(query.owners)
            async for page in ec2.get_paginator("describe_images").paginate(**params):
                for i in page.get("Images", []):
                    found[i["ImageId"]] = core.FoundImage(
                        i["ImageId"],
                        i.get("Name", ""),
                        i.get("Architecture", ""),
                        i.get("CreationDate", ""),
                        i.get("DeprecationTime"),
                        variants.get(i["ImageId"]),
                    )
        return list(found.values())

    async def _parameters(self, names: list[str]) -> dict[str, str]:
        """Each parameter's value; one SSM does not hold is skipped, as upstream skips it."""
        out: dict[str, str] = {}
        if not names:
            return out
        async with self.clients("ssm") as ssm:
            for name in names:
                try:
                    answer = await ssm.get_parameter(Name=name)
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
                        continue
                    raise
                out[name] = answer["Parameter"]["Value"]
        return out

    async def _instance_profile(self, nodeclass: EC2NodeClass) -> tuple[str | None, str]:
        """`spec.instanceProfile` as it is; for `spec.role`, the class's own profile with the
        role in it (made, or the role put in, when missing). A role IAM does not know makes the
        class not ready, saying so, rather than failing the whole resolution."""
        spec = nodeclass.spec
        if not spec.role:
            return spec.instance_profile, ""
        uid = nodeclass.metadata.uid or nodeclass.name
        name = core.instance_profile_name(self.cluster, self.region, nodeclass.name, uid)
        async with self.clients("iam") as iam:
            try:
                profile = (await iam.get_instance_profile(InstanceProfileName=name))["InstanceProfile"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
                    raise
                tags = {
                    **(spec.tags or {}),
                    f"kubernetes.io/cluster/{self.cluster}": "owned",
                    CLUSTER_NAME_TAG: self.cluster,
                    DISCOVERED_TAG: nodeclass.name,
                    "topology.kubernetes.io/region": self.region,
                }
                await iam.create_instance_profile(
                    InstanceProfileName=name,
                    Path=profile_path(self.region, self.cluster, uid),
                    Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                )
                profile = {"Roles": []}
            roles = [r["RoleName"] for r in profile.get("Roles", [])]
            if roles == [spec.role]:
                return name, ""
            for role in roles:
                await iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role)
            try:
                await iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=spec.role)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
                    raise
                return None, f"role {spec.role!r}: {exc.response['Error'].get('Message', 'not found')}"
        return name, ""


class VersionedResolver:
    """A `NodeClassResolver` made at its first use, once the cluster's Kubernetes version (which
    names the EKS AMI parameters) has been read from the API server."""

    def __init__(
        self, clients: ClientFactory, *, cluster: str, region: str, version: Callable[[], Awaitable[str]]
    ) -> None:
        self.clients, self.cluster, self.region, self.version = clients, cluster, region, version
        self.resolver: NodeClassResolver | None = None
        self.cleanup = NodeClassCleanup(clients, cluster=cluster, region=region)

    async def clean_up(self, nodeclass: str, uid: str | None = None) -> Cleaned:
        """Needs no Kubernetes version: a class deleted is cleaned up even before any resolves."""
        return await self.cleanup.clean_up(nodeclass, uid)

    async def resolve(
        self, nodeclass: EC2NodeClass, now: datetime, previous: Sequence[Mapping[str, Any]] = ()
    ) -> core.Resolution:
        if self.resolver is None:
            version = await self.version()
            self.resolver = NodeClassResolver(
                self.clients, cluster=self.cluster, region=self.region, k8s_version=version
            )
        return await self.resolver.resolve(nodeclass, now, previous)
