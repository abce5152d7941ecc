"""The audit's re-check of replacements launched in another pool than their candidates'.

Upstream launches a consolidation's or drift's replacement wherever its simulation puts it. The
store reserves such a replacement in its own (target) pool exactly as a launch: every limit of
that pool, `limits.nodes` in either mode, with nothing of the candidates subtracted (they count
in another pool). The audit asks the same of the log, apart from the store's own check, and one
thing the store cannot see from the target pool: that the decision named in `replacement_from`
planned this claim into this pool while it was live. A replacement that fails either is a
violation the audit names.

Counters never cross pools, but these plans do: a split fold (`audit.Partition`) may see the
claim and its decision in different parts, so what one part cannot settle it keeps
(`CrossPool.open`) for the join to settle (`CrossPool.merged`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.api.quantity import format_quantity
from shared.policy.counters import Outcome
from shared.policy.limits import exceeded_limits
from shared.policy.pool_state import PoolCounters
from shared.policy.resources import largest_capacity
from shared.policy.violations import Rule, Violation

WATCHED = frozenset({"DisruptionDecided", "DisruptionCancelled", "DisruptionCompleted", "NodeClaimCreated"})
"""The events a `CrossPool` reads: the rest never change what it knows."""


def target_limits(pool: PoolCounters, data: Mapping[str, Any]) -> Violation | None:
    """Whether creating this replacement passes its target pool's limits (its resources and
    `limits.nodes`, as a launch's are), given the pool as it was before the claim."""
    policy = pool.policy()
    if policy is None:
        return Violation(Rule.NODEPOOL, f"nodepool {pool.nodepool} is not applied; no replacement may go there")
    over = exceeded_limits(policy.limits, pool.usage(), largest_capacity(data["instance_types"]))
    if not over:
        return None
    parts = ", ".join(
        f"{res} {format_quantity(after)} > limit {format_quantity(limit)}" for res, (after, limit) in over.items()
    )
    return Violation(
        Rule.LIMITS,
        f"nodepool {pool.nodepool}: replacement {data['nodeclaim']} for disruption {data.get('replacement_for')} "
        f"would exceed its limits: {parts}",
        {"exceeded": {res: [str(after), str(limit)] for res, (after, limit) in over.items()}},
    )


@dataclass(slots=True)
class Plan:
    """A decision's replacements in other pools, and when the decision stopped planning them."""

    position: int
    nodepool: str
    targets: dict[str, str]
    ended: int | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A replacement created in another pool, not settled by the part that saw it."""

    position: int
    stream: str
    nodeclaim: str
    nodepool: str
    decision: str
    source: str


@dataclass(slots=True)
class CrossPool:
    """The decisions' cross-pool plans as a fold sees them, and the replacements it could not
    settle (their decision is another part's)."""

    plans: dict[str, Plan] = field(default_factory=dict)
    open: list[Claimed] = field(default_factory=list)

    def see(
        self, position: int, stream: str, event_type: str, data: Mapping[str, Any], pool: PoolCounters, whole: bool
    ) -> Violation | None:
        """Read one event (before its step moves `pool`); a violation of a replacement it
        settles. `whole`: the fold reads the whole log, so an unknown decision is settled now."""
        decision = data.get("decision_id")
        if event_type == "DisruptionDecided":
            targets = {k: v for k, v in (data.get("replacement_nodepools") or {}).items() if v != data["nodepool"]}
            if targets:
                self.plans[decision] = Plan(position, data["nodepool"], targets)
            return None
        if event_type != "NodeClaimCreated":
            plan = self.plans.get(decision)
            if plan is not None and plan.ended is None:
                plan.ended = position
            return None
        source = data.get("replacement_from")
        if not data.get("replacement_for") or source in (None, data["nodepool"]):
            return None
        claimed = Claimed(position, stream, data["nodeclaim"], data["nodepool"], data["replacement_for"], source)
        if claimed.decision not in self.plans and not whole:
            self.open.append(claimed)
            return target_limits(pool, data)
        return _planned(claimed, self.plans.get(claimed.decision)) or target_limits(pool, data)

    def audited(self, entry: Sequence[Any], pool: PoolCounters, outcome: Outcome, *, whole: bool) -> Outcome:
        """The audit's hook: `outcome` (the store's rule's) unless it found nothing and this
        re-check finds a violation. `entry`: the log entry (position, stream, type, data, ...)."""
        found = self.see(entry[0], entry[1], entry[2], entry[3], pool, whole)
        return outcome if outcome.violation is not None or found is None else Outcome(found)

    def settle(self) -> list[tuple[Claimed, Violation]]:
        """The open replacements against every plan known now (after a join: every part's)."""
        out = [(c, v) for c in self.open if (v := _planned(c, self.plans.get(c.decision))) is not None]
        self.open = []
        return out

    @classmethod
    def merged(cls, parts: Iterable[CrossPool]) -> CrossPool:
        out = cls()
        for part in parts:
            out.plans.update(part.plans)
            out.open.extend(part.open)
        return out


def _planned(claimed: Claimed, plan: Plan | None) -> Violation | None:
    """Whether a live decision of `replacement_from` planned this claim into this pool."""
    where = f"replacement {claimed.nodeclaim} in nodepool {claimed.nodepool}"
    if plan is None or plan.position > claimed.position or plan.nodepool != claimed.source:
        return Violation(
            Rule.LIFECYCLE,
            f"{where} says disruption {claimed.decision} of nodepool {claimed.source} planned it; no such decision did",
        )
    if plan.targets.get(claimed.nodeclaim) != claimed.nodepool:
        return Violation(
            Rule.LIFECYCLE,
            f"{where}: disruption {claimed.decision} planned no replacement of that name in that pool",
        )
    if plan.ended is not None and plan.ended < claimed.position:
        return Violation(Rule.LIFECYCLE, f"{where}: disruption {claimed.decision} had ended before it was created")
    return None
