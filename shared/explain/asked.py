"""One claim of one `World` as `nodewright explain` asks the disruption core about it (`Asked`),
the names of the methods it is asked by, and how a verdict and its figures are written."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from shared.api.nodepool import DisruptionReason, NodePool
from shared.disruption.candidates import Blocked, Candidate
from shared.disruption.method import Round
from shared.disruption.passes import BUDGET, forceful
from shared.disruption.world import Node, World
from shared.explain import model as m
from shared.explain.budgets import budget_at, told
from shared.policy.budgets import blocked_by_budget_message

EXPIRATION, OVERLIMIT, EMPTINESS, DRIFT, CONSOLIDATION = (
    "Expiration",
    "OverLimit",
    "Emptiness",
    "Drift",
    "Consolidation",
)
SCALE_DOWN, NODE_REPAIR, STATIC_DRIFT = "StaticScaleDown", "NodeRepair", "StaticDrift"
SHOWN_PODS = 5


class Asked:
    """One claim of one world, and what the core says of it."""

    def __init__(self, world: World, node: Node, pool: NodePool | None, disrupting: int) -> None:
        self.world, self.node, self.pool = world, node, pool
        self.name = node.state.nodeclaim
        self.round = Round(world)
        self.rules = world.pools.get(node.state.nodepool)
        self.disrupting = disrupting
        self.budgets: dict[str, m.Budget] = {}
        self.forceful = forceful(world)

    @property
    def static(self) -> bool:
        """Its pool sets `spec.replicas` (`PoolRules.replicas`, which the core's methods read)."""
        return self.rules is not None and self.rules.replicas is not None

    def candidate(self, disruption_class: str) -> Candidate | Blocked | None:
        """The claim as the class's candidate check judged it: a candidate, blocked (with why),
        or None (not initialized, or going)."""
        for c in self.round.candidates(disruption_class):
            if c.nodeclaim == self.name:
                return c
        for b in self.round.blocked(disruption_class):
            if b.nodeclaim == self.name:
                return b
        return None

    def budget(self, reason: DisruptionReason) -> m.Budget | None:
        """The reason's budget in the claim's pool (None: no pool, or no counters for it)."""
        if self.pool is None or self.rules is None:
            return None
        if reason not in self.budgets:
            self.budgets[reason] = budget_at(self.pool, reason, self.world.now, self.rules.nodes, self.disrupting)
        return self.budgets[reason]

    def remaining(self, reason: DisruptionReason) -> dict[str, int | None]:
        """The budgets a method is handed: the claim's pool's remaining for the reason."""
        left = self.rules.remaining.get(reason) if self.rules is not None else 0
        return {self.node.state.nodepool: left}

    def no_budget(self, method: str, reason: DisruptionReason) -> m.Verdict | None:
        """The Budget verdict when the reason has nothing left in the pool, else None."""
        left = self.remaining(reason)[self.node.state.nodepool]
        if left is not None and left > 0:
            return None
        budget = self.budget(reason)
        message = blocked_by_budget_message(reason)
        if budget is not None:
            message += f": {told(budget)}"
        return m.Verdict(method=method, reason=str(reason), applies=True, disrupts=False, cause=BUDGET, message=message)


def span(value: timedelta | None) -> str:
    """A duration as a NodePool writes one (`1h30m`, `45s`; Never for None)."""
    if value is None:
        return "Never"
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts, sign = [], "-" if seconds < 0 else ""
    seconds = abs(seconds)
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return sign + "".join(parts)


def instant(at: datetime | None) -> str:
    return at.isoformat() if at is not None else "-"


def disrupted(method: str, reason: str, message: str, details: Mapping[str, Any] | None = None) -> m.Verdict:
    """The method applies to the claim and disrupts it now."""
    return m.Verdict(
        method=method,
        reason=str(reason),
        applies=True,
        disrupts=True,
        message=message,
        details=dict(details or {}),
    )


def not_disrupted(
    method: str,
    reason: str,
    cause: str,
    message: str,
    applies: bool = False,
    details: Mapping[str, Any] | None = None,
) -> m.Verdict:
    return m.Verdict(
        method=method,
        reason=str(reason),
        applies=applies,
        disrupts=False,
        cause=cause,
        message=message,
        details=dict(details or {}),
    )
