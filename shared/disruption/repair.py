"""Node repair (upstream's `pkg/controllers/node/health/`, behind the `NodeRepair` gate): a node
whose condition matches one of the cloud provider's repair policies for longer than the policy
tolerates is deleted forcefully (no budget, no PDB, no graceful drain), unless more than 20% of
its pool's nodes are unhealthy at once, when repair is blocked for the pool (`NodeRepairBlocked`).

A node counts as unhealthy for the threshold as soon as a policy's condition matches, tolerated or
not, as upstream counts it; the threshold is 20% of the pool's nodes, rounded up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.api.core import NODE_READY
from shared.disruption.command import Command
from shared.policy.unhealthy import ALLOWED_UNHEALTHY_PERCENT, unhealthy_threshold

READY = NODE_READY
UNHEALTHY = "Unhealthy"
"""Upstream's disruption reason for a repaired node (`metrics.UnhealthyReason`)."""
REPAIR_BLOCKED = "NodeRepairBlocked"
REPAIR_BLOCKED_MESSAGE = f"more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the nodepool"


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """A cloud provider's repair policy: a node whose `condition` has had `status` for
    `toleration` is repaired."""

    condition: str
    status: str
    toleration: timedelta


AWS_REPAIR_POLICIES = (
    RepairPolicy(READY, "False", timedelta(minutes=30)),
    RepairPolicy(READY, "Unknown", timedelta(minutes=30)),
    RepairPolicy("AcceleratedHardwareReady", "False", timedelta(minutes=10)),
    RepairPolicy("StorageReady", "False", timedelta(minutes=30)),
    RepairPolicy("NetworkingReady", "False", timedelta(minutes=30)),
    RepairPolicy("KernelReady", "False", timedelta(minutes=30)),
    RepairPolicy("ContainerRuntimeReady", "False", timedelta(minutes=30)),
)
"""The AWS provider's policies (the kubelet's Ready, and the node monitoring agent's conditions);
the sim declares the same, as upstream's kwok provider declares a provider's."""


@dataclass(frozen=True, slots=True)
class Condition:
    """A node condition as the log recorded it: its type, status, and since when."""

    type: str
    status: str
    since: datetime


@dataclass(frozen=True, slots=True)
class Sick:
    """A node of a pool with the conditions it has now (only those not healthy are needed)."""

    nodeclaim: str
    nodepool: str
    conditions: Sequence[Condition]


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why a node is repaired: its condition, since when, and what the policy tolerates."""

    condition: str
    status: str
    since: datetime
    toleration: timedelta

    @property
    def due(self) -> datetime:
        return self.since + self.toleration


@dataclass(frozen=True, slots=True)
class Repairs:
    commands: tuple[tuple[Command, str, Evidence], ...] = ()
    """(command, pool, evidence) per node to repair now."""
    blocked: tuple[tuple[str, str], ...] = ()
    """(nodeclaim, pool) per node due for repair that the pool's threshold holds back."""


def unhealthy(conditions: Sequence[Condition], policies: Sequence[RepairPolicy]) -> Evidence | None:
    """The matching policy whose toleration ends first (upstream's `findUnhealthyConditions`)."""
    best: Evidence | None = None
    for policy in policies:
        for condition in conditions:
            if condition.type == policy.condition and condition.status == policy.status:
                found = Evidence(condition.type, condition.status, condition.since, policy.toleration)
                if best is None or found.due < best.due:
                    best = found
    return best


def repairs(
    sick: Sequence[Sick], pool_nodes: Mapping[str, int], policies: Sequence[RepairPolicy], now: datetime
) -> Repairs:
    """The nodes to repair now, and those held back by their pool's threshold. `pool_nodes`: each
    pool's nodes (registered, not yet gone), of which `sick` lists the ones with conditions."""
    if not policies:
        return Repairs()
    found = [(s, unhealthy(s.conditions, policies)) for s in sick]
    matching: dict[str, int] = {}
    for s, evidence in found:
        if evidence is not None:
            matching[s.nodepool] = matching.get(s.nodepool, 0) + 1
    commands, blocked = [], []
    for s, evidence in sorted(found, key=lambda pair: pair[0].nodeclaim):
        if evidence is None or now < evidence.due:
            continue
        if matching[s.nodepool] > unhealthy_threshold(pool_nodes.get(s.nodepool, 0)):
            blocked.append((s.nodeclaim, s.nodepool))
            continue
        commands.append((Command(UNHEALTHY, (s.nodeclaim,)), s.nodepool, evidence))
    return Repairs(tuple(commands), tuple(blocked))
