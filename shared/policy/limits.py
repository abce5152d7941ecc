"""Node limits and resource limits (`spec.limits`, checked as upstream's provisioning does, and `limits.nodes`).

Provisioning never creates past a limit, in either node-limit mode. A pool's node count covers
launched and in-flight NodeClaims. Graceful disruption (consolidation, drift) that launches
replacements is also bounded in `Hard` mode: the replacements must fit under `limits.nodes`
while the old nodes are still there. This refines the min(budget, remaining limit) rule of `limits.nodes`,
which would also stop pure deletes at the limit although a delete only ever lowers the count:
the invariant "never more nodes than the limit" is kept, and deletes are never blocked by it.
`Soft` mode lets disruption ignore the node limit. Forceful methods (expiration) are never
blocked by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from shared.api.nodepool import NODES_RESOURCE, DisruptionReason, NodeLimitMode, NodePool


@dataclass(frozen=True, slots=True)
class NodeLimit:
    limit: int | None
    nodes: int
    mode: NodeLimitMode = NodeLimitMode.HARD

    @classmethod
    def of(cls, nodepool: NodePool, nodes: int) -> NodeLimit:
        return cls(nodepool.spec.node_limit, nodes, nodepool.spec.disruption.node_limit_mode)

    @property
    def headroom(self) -> int | None:
        """Nodes that may still be created; None when there is no node limit."""
        return None if self.limit is None else max(self.limit - self.nodes, 0)

    @property
    def excess(self) -> int:
        """Nodes above the limit (after `limits.nodes` was lowered); these are removed."""
        return 0 if self.limit is None else max(self.nodes - self.limit, 0)

    def can_provision(self, count: int = 1) -> bool:
        return self.limit is None or self.nodes + count <= self.limit

    def blocks_replacements(self, replacements: int) -> bool:
        """Hard mode: replacements launched before the old nodes go must fit under the limit."""
        if self.mode == NodeLimitMode.SOFT or self.limit is None or replacements <= 0:
            return False
        return self.nodes + replacements > self.limit


def blocked_by_node_limit_message(reason: DisruptionReason) -> str:
    return f"No allowed disruptions for disruption reason {reason} due to node hard limit"


def remaining_resources(limits: Mapping[str, Decimal], usage: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Each limited resource minus what the pool uses (may be negative when over the limit)."""
    return {name: limit - usage.get(name, Decimal(0)) for name, limit in limits.items()}


def exceeded_limits(
    limits: Mapping[str, Decimal], usage: Mapping[str, Decimal], adding: Mapping[str, Decimal]
) -> dict[str, tuple[Decimal, Decimal]]:
    """Resources a launch of `adding` would take past their limit: {name: (would-be usage, limit)}.
    A launch always adds one node to the `nodes` resource."""
    adding = {**adding, NODES_RESOURCE: adding.get(NODES_RESOURCE, Decimal(1))}
    out = {}
    for name, limit in limits.items():
        after = usage.get(name, Decimal(0)) + adding.get(name, Decimal(0))
        if after > limit:
            out[name] = (after, limit)
    return out
