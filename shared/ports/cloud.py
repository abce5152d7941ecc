"""The `CloudProvider` port: launching and terminating instances for NodeClaims.

Requests and instances travel as JSON-ready dicts (`LaunchSpec`, `InstanceView`), so the port
works the same in one process and over NATS. Adapters: the sim (`shared.adapters.sim`) and
AWS (`shared.adapters.aws.provider`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from shared.disruption.repair import RepairPolicy

LaunchSpec = dict[str, Any]
"""{nodeclaim, nodepool, nodeClassRef: {group, kind, name}, requirements: [{key, operator,
values}], requests: {name: quantity}, labels, taints: [taint], startupTaints: [taint], firstAsk,
unavailable: [[instanceType, zone, capacityType]], prioritized: [instanceType]}. `firstAsk`: no
create was asked for this claim before (its creator's first), so no instance of it can exist and
a provider may skip looking for one. `unavailable`: offerings of its types the insufficient-capacity cache holds
(a failed launch, a spot interruption), which the launch must not fall back on. `prioritized`
(set when NodeOverlays ordered the claim's types): launch the first type it can in that order,
not the cloud's own cheapest."""

InstanceView = dict[str, Any]
"""{providerID, nodeclaim, nodepool, instanceType, zone, capacityType, price, capacity,
allocatable, labels, launchedAt, state, interruptedAt}, and from a cloud whose node classes can
drift (AWS) {imageID, subnetID, securityGroupIDs}. A create's view may carry `refused`:
[[instanceType, zone, capacityType]], the offerings the cloud had no capacity for on the way to
the one it launched, which go in the insufficient-capacity cache as a refused launch's do."""


class CloudError(Exception):
    pass


class InsufficientCapacityError(CloudError):
    """No offering the claim allows can be launched now (upstream's InsufficientCapacityError).
    `offerings`: the (instance type, zone, capacity type) the cloud refused, when it says which;
    empty: every offering the claim allowed."""

    def __init__(self, message: str, *, offerings: Sequence[tuple[str, str, str]] = ()) -> None:
        super().__init__(message)
        self.offerings = tuple(offerings)


class CloudUnreachable(CloudError, OSError):
    """The cloud did not answer (a connection refused or cut, a timeout, throttling past the
    retries): an outage, which the services ride out as they ride out one of NATS, not a refusal."""


class NoCompatibleInstanceTypes(CloudError):
    pass


class InstanceNotFound(CloudError):
    pass


class CloudProvider(Protocol):
    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        """The instance types a NodePool may launch, with their offerings (upstream's
        `GetInstanceTypes(nodePool)`). `node_class`: the pool's node class, whose settings (an
        EC2NodeClass's kubelet, block devices) change capacity and allocatable; None: the
        defaults. A cloud whose classes change nothing (the sim) answers the same for all."""
        ...

    async def create(self, spec: LaunchSpec) -> InstanceView:
        """Launch an instance for `spec["nodeclaim"]`; idempotent per NodeClaim (a client token):
        asked again while that claim's instance runs, it returns that instance."""
        ...

    async def delete(self, provider_id: str) -> InstanceView: ...

    async def list(self) -> list[InstanceView]: ...

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """The node conditions this cloud repairs, each with how long it is tolerated (upstream's
        `RepairPolicies`); node repair acts on them when its gate is on."""
        ...
