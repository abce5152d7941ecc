"""A scenario's AWS account made on a local EC2 endpoint (moto): `spec.cloud.aws`.

The VPC, its subnets and security groups with their tags, and one of the endpoint's images per
wanted architecture, tagged as the classes' `amiSelectorTerms` select it: the scenario's
EC2NodeClasses resolve as they would in an EKS account. Made once: a VPC
tagged for the cluster already there means the account was seeded. Refused unless the endpoint
is a local one given by `AWS_ENDPOINT_URL`, so no run ever creates resources in a real account.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from shared.adapters.aws.session import AwsSettings, ClientFactory
from shared.api.aws_seed import AwsSeed

SEED_TAG = "nodewright.dev/seeded-for"
NODE_TRUST = (
    '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},'
    '"Action":"sts:AssumeRole"}]}'
)
"""The trust policy of a node role: EC2 instances may take it."""


class SeedRefused(ValueError):
    """Seeding was asked of an endpoint that is not a local one."""


@dataclass
class Seeded:
    vpc: str
    subnets: dict[str, str] = field(default_factory=dict)  # cidr -> subnet id
    security_groups: dict[str, str] = field(default_factory=dict)  # name -> group id
    images: list[str] = field(default_factory=list)  # the images tagged
    made: bool = True  # False: the account was seeded already


def local_endpoint(settings: AwsSettings) -> str:
    """The endpoint seeding may write to: an explicit one on this machine."""
    endpoint = settings.endpoint_url or ""
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        raise SeedRefused(
            "spec.cloud.aws is made only on a local endpoint (AWS_ENDPOINT_URL=http://127.0.0.1:PORT, a moto"
            f" server), never on {endpoint or 'AWS itself'}"
        )
    return endpoint


def _tags(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


async def seed(clients: ClientFactory, settings: AwsSettings, spec: AwsSeed, cluster: str) -> Seeded:
    local_endpoint(settings)
    async with clients("ec2") as ec2:
        found = await ec2.describe_vpcs(Filters=[{"Name": f"tag:{SEED_TAG}", "Values": [cluster]}])
        if found["Vpcs"]:
            return Seeded(found["Vpcs"][0]["VpcId"], made=False)
        vpc = (await ec2.create_vpc(CidrBlock=spec.vpc_cidr_block))["Vpc"]["VpcId"]
        seeded = Seeded(vpc)
        for subnet in spec.subnets:
            made = await ec2.create_subnet(VpcId=vpc, CidrBlock=subnet.cidr_block, AvailabilityZone=subnet.zone)
            subnet_id = made["Subnet"]["SubnetId"]
            if subnet.tags:
                await ec2.create_tags(Resources=[subnet_id], Tags=_tags(subnet.tags))
            seeded.subnets[subnet.cidr_block] = subnet_id
        for group in spec.security_groups:
            made = await ec2.create_security_group(GroupName=group.name, Description=group.name, VpcId=vpc)
            if group.tags:
                await ec2.create_tags(Resources=[made["GroupId"]], Tags=_tags(group.tags))
            seeded.security_groups[group.name] = made["GroupId"]
        for wanted in spec.images:
            image = await _an_image(ec2, wanted.architecture)
            if image is None:
                raise SeedRefused(f"the endpoint holds no Amazon image for {wanted.architecture}")
            await ec2.create_tags(Resources=[image], Tags=_tags(wanted.tags))
            seeded.images.append(image)
        async with clients("iam") as iam:
            for role in spec.roles:  # IAM is the account's, not the VPC's: a role may be there already
                with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
                    await iam.create_role(RoleName=role, AssumeRolePolicyDocument=NODE_TRUST)
        # tagged last: a seed cut short is made again (in a new VPC), never taken for done
        await ec2.create_tags(Resources=[vpc], Tags=_tags({SEED_TAG: cluster, "Name": cluster}))
    return seeded


async def _an_image(ec2: Any, arch: str) -> str | None:
    """An Amazon-owned image of that architecture among those the endpoint holds (moto's bundled
    ones: its RegisterImage keeps no architecture), the newest by name."""
    answer = await ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "architecture", "Values": [arch]}])
    images = sorted(answer.get("Images", []), key=lambda i: (i.get("CreationDate") or "", i.get("Name") or ""))
    return images[-1]["ImageId"] if images else None
