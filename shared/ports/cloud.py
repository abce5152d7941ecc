"""The `CloudProvider` port: launching and terminating instances for NodeClaims.

Requests and instances travel as JSON-ready dicts (`LaunchSpec`, `InstanceView`), so the port
works the same in one process and over NATS. Adapters: the sim (`shared.adapters.sim`); real
providers later.
"""

from __future__ import annotations

from typing import Any, Protocol

LaunchSpec = dict[str, Any]
"""{nodeclaim, nodepool, requirements: [{key, operator, values}], requests: {name: quantity},
labels, taints: [taint], startupTaints: [taint]}"""

InstanceView = dict[str, Any]
"""{providerID, nodeclaim, nodepool, instanceType, zone, capacityType, price, capacity,
allocatable, labels, launchedAt, state, interruptedAt}"""


class CloudError(Exception):
    pass


class InsufficientCapacityError(CloudError):
    """No offering the claim allows can be launched now (upstream's InsufficientCapacityError)."""


class NoCompatibleInstanceTypes(CloudError):
    pass


class InstanceNotFound(CloudError):
    pass


class CloudProvider(Protocol):
    async def instance_types(self) -> list[dict[str, Any]]: ...

    async def create(self, spec: LaunchSpec) -> InstanceView:
        """Launch an instance for `spec["nodeclaim"]`; idempotent per NodeClaim (a client token):
        asked again while that claim's instance runs, it returns that instance."""
        ...

    async def delete(self, provider_id: str) -> InstanceView: ...

    async def list(self) -> list[InstanceView]: ...
