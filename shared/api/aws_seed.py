"""A scenario's AWS account, for a run against a local EC2 endpoint (moto): `spec.cloud.aws`.

A scenario played with `--cloud aws` needs the network and images its EC2NodeClasses select: a
VPC, subnets in the zones the pools use (with the tags the class's `subnetSelectorTerms` match),
security groups, and images with the tags its `amiSelectorTerms` match (the SSM parameters
behind an alias live under `/aws/`, which nobody may write, on moto as on AWS). `nodewright run
--cloud aws` makes them before the clock starts, and only on an endpoint given by
`AWS_ENDPOINT_URL` on this machine (never in an account reached through AWS itself).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from shared.api.base import APIModel
from shared.api.bounds import MAX_ZONES

Name = Annotated[str, Field(min_length=1, max_length=255)]
Tags = Annotated[dict[Name, Annotated[str, Field(max_length=255)]], Field(max_length=50)]


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise ValueError(f"Invalid value: {value!r}: must be an IPv4 CIDR block such as 10.0.1.0/24") from None
    if network.version != 4 or not 16 <= network.prefixlen <= 28:
        raise ValueError(f"Invalid value: {value!r}: an IPv4 block between /16 and /28, as EC2 accepts")
    return value


class AwsSubnet(APIModel):
    zone: Name
    cidr_block: str
    tags: Tags = Field(default_factory=dict)

    _check = field_validator("cidr_block")(_cidr)


class AwsSecurityGroup(APIModel):
    name: Name
    tags: Tags = Field(default_factory=dict)


class AwsImage(APIModel):
    architecture: Literal["x86_64", "arm64"] = "x86_64"
    tags: Annotated[Tags, Field(min_length=1)]


class AwsSeed(APIModel):
    vpc_cidr_block: str = "10.0.0.0/16"
    subnets: Annotated[list[AwsSubnet], Field(min_length=1, max_length=MAX_ZONES * 4)]
    security_groups: Annotated[list[AwsSecurityGroup], Field(max_length=50)] = Field(default_factory=list)
    images: Annotated[list[AwsImage], Field(max_length=10)] = Field(default_factory=list)
    """Images the endpoint holds (moto's bundled ones), tagged so the classes' terms select them."""
    roles: Annotated[list[Name], Field(max_length=10)] = Field(default_factory=list)
    """IAM roles the nodes run as (a class's `role`): nodewright makes their instance profiles."""

    _check = field_validator("vpc_cidr_block")(_cidr)

    @model_validator(mode="after")
    def _inside_the_vpc(self) -> AwsSeed:
        vpc = ipaddress.ip_network(self.vpc_cidr_block)
        seen: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for subnet in self.subnets:
            block = ipaddress.ip_network(subnet.cidr_block)
            if not block.subnet_of(vpc):  # type: ignore[arg-type]
                raise ValueError(f"Invalid value: subnet {subnet.cidr_block} is outside the VPC's {vpc}")
            if any(block.overlaps(other) for other in seen):
                raise ValueError(f"Invalid value: subnet {subnet.cidr_block} overlaps another subnet")
            seen.append(block)
        names = [g.name for g in self.security_groups]
        if len(set(names)) != len(names):
            raise ValueError("Duplicate value: a security group name is given twice")
        return self
