"""The instance types as one EC2NodeClass may launch them: an offering is available only in a
zone where the class resolved a subnet, and only for a type one of the class's AMIs fits.

Upstream computes instance types per node class (aws/karpenter-provider-aws
`pkg/providers/instancetype/types.go` `computeRequirements`: the zones a type offers are those it
is sold in and the class has subnets in; `offering/base_resolver.go` keeps an offering for every
zone of the region, available or not). Without this a pool was offered every zone of the region,
planned a claim in a zone its class has no subnet in, and the launch could only fail. A type no
AMI of the class fits (an architecture the class resolved no image for) has every offering
unavailable, as the launch would find no template for it; so has an `a1` type on AL2023, which
that family does not run on (upstream's AMI family compatibility check).

Offerings are flagged, never dropped: drift asks whether an offering exists at all
(`InstanceTypeNotFound`), not whether it can launch now. Pure: the class's status comes in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.instance_types import InstanceTypeEntry
from shared.aws.launch_template import ami_for
from shared.aws.settings import ami_family


def subnet_zones(node_class: EC2NodeClass) -> frozenset[str]:
    """The zones of the class's resolved subnets (none before its first resolution)."""
    status = node_class.status
    return frozenset(s.zone for s in (status.subnets or [] if status else []) if s.zone)


def for_node_class(entries: Sequence[InstanceTypeEntry], node_class: EC2NodeClass) -> list[InstanceTypeEntry]:
    """The entries with each offering available only where the class can launch it: its zone
    has a subnet of the class and an AMI of the class fits the type."""
    zones = subnet_zones(node_class)
    status = node_class.status
    amis = status.amis or [] if status else []
    al2023 = ami_family(node_class) == "AL2023"
    out = []
    for entry in entries:
        fits = ami_for(entry.labels, amis) is not None and not (al2023 and entry.name.startswith("a1."))
        offerings = tuple(
            o if not o.available or (fits and o.zone in zones) else replace(o, available=False) for o in entry.offerings
        )
        out.append(entry if offerings == entry.offerings else replace(entry, offerings=offerings))
    return out
