"""Where the AWS provider reads a NodePool's EC2NodeClass from: the `NodeClassSource` port, and
its adapter over the Kubernetes API.

The provider launches only with a class the nodeclass controller has resolved: its status names
the subnets, security groups, AMIs and instance profile, and its `Ready` condition is true. A
class missing or not ready is the launch's `CloudError`, naming the class and why.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import ValidationError

from shared.api.core import ConditionStatus
from shared.api.ec2nodeclass import EC2NodeClass
from shared.ports.cloud import CloudError
from shared.ports.cluster import ClusterError

READY = "Ready"


class NodeClassSource(Protocol):
    async def get(self, name: str) -> EC2NodeClass | None:
        """The EC2NodeClass named `name` with its status, or None when there is none."""
        ...


class NodeClassObjects(Protocol):
    """The part of the `Cluster` port the provider reads classes through."""

    async def get_nodeclass(self, nodeclass: str) -> dict[str, Any] | None: ...


class KubeNodeClasses:
    """EC2NodeClasses read from the Kubernetes API at each launch (a GET of one object)."""

    def __init__(self, objects: NodeClassObjects) -> None:
        self.objects = objects

    async def get(self, name: str) -> EC2NodeClass | None:
        try:
            raw = await self.objects.get_nodeclass(name)
        except ClusterError as exc:  # the API refused or is out of reach: this launch fails, the next tries
            raise CloudError(f"EC2NodeClass {name} could not be read: {exc}") from None
        if raw is None:
            return None
        try:
            return EC2NodeClass.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise CloudError(f"EC2NodeClass {name}: {where}: {first['msg']}") from None


def ready_node_class(node_class: EC2NodeClass | None, name: str) -> EC2NodeClass:
    """The class if it can launch: present, `Ready` true, its subnets, security groups and AMIs
    resolved; otherwise a CloudError saying which."""
    if node_class is None:
        raise CloudError(f"EC2NodeClass {name} not found")
    status = node_class.status
    if status is None:
        raise CloudError(f"EC2NodeClass {name} is not Ready (no status yet)")
    ready = next((c for c in status.conditions or [] if c.type == READY), None)
    if ready is None or ready.status != ConditionStatus.TRUE:
        why = f" ({ready.reason}: {ready.message})" if ready is not None else " (no Ready condition)"
        raise CloudError(f"EC2NodeClass {name} is not Ready{why}")
    for field, value in (
        ("subnets", status.subnets),
        ("securityGroups", status.security_groups),
        ("amis", status.amis),
    ):
        if not value:
            raise CloudError(f"EC2NodeClass {name}: status.{field} is empty")
    return node_class
