"""What the sim's kubelets see of EC2 (`services.sim.kubelet`): the instances tagged for the
cluster that are pending or running, each with the NodeClaim its tag names.

Asked through aiobotocore, as nodewright's AWS provider asks, so with `AWS_ENDPOINT_URL` pointing
at a moto server the sim plays a cluster whose nodes are moto's instances.
"""

from __future__ import annotations

from typing import Any

from services.sim.kubelet import CloudInstances, SeenInstance
from shared.adapters.aws.session import ClientFactory

NODECLAIM_TAG = "karpenter.sh/nodeclaim"
RUNNING = ["pending", "running"]


def provider_id(instance: dict[str, Any]) -> str:
    """The providerID a kubelet on AWS reports: `aws:///<zone>/<instance id>`."""
    return f"aws:///{instance['Placement']['AvailabilityZone']}/{instance['InstanceId']}"


def ec2_instances(clients: ClientFactory, cluster_name: str) -> CloudInstances:
    """The cluster's live instances that carry a NodeClaim tag, as a kubelet on each would know."""
    filters = [
        {"Name": "tag-key", "Values": [f"kubernetes.io/cluster/{cluster_name}"]},
        {"Name": "instance-state-name", "Values": RUNNING},
    ]

    async def running() -> list[SeenInstance]:
        seen: list[SeenInstance] = []
        async with clients("ec2") as ec2:
            async for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
                for reservation in page.get("Reservations", []):
                    for instance in reservation.get("Instances", []):
                        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                        if NODECLAIM_TAG not in tags:
                            continue
                        seen.append(
                            SeenInstance(
                                provider_id(instance),
                                tags[NODECLAIM_TAG],
                                instance["InstanceType"],
                                instance["Placement"]["AvailabilityZone"],
                            )
                        )
        return sorted(seen, key=lambda i: i.provider_id)

    return running
