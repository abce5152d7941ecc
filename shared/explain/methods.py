"""Each disruption method asked about one claim of a `World`, in the pass's order (the forceful
Expiration and OverLimit, then the graceful Emptiness, Drift and Consolidation), and the answer
told with its cause.

Every verdict is the disruption core's own: the candidate check (`candidates.candidate`, through
`Round`), `expiration`, `forceful`'s over-limit removal, `emptiness`, and the `Drift` and
`SingleNodeConsolidation` methods' `compute_commands` given this claim alone within its pool's
budget. Nothing here decides; it picks the claim out of what the core said and adds the figures
that say why: when it becomes Consolidatable, the budget windows, the cheapest replacement the
simulation found against its price now, the pods that would not schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from shared.api.nodepool import DisruptionReason, NodePool
from shared.disruption.candidates import Blocked, Candidate
from shared.disruption.consolidatable import disabled_message
from shared.disruption.consolidation import movable
from shared.disruption.drift import Drift
from shared.disruption.emptiness import emptiness
from shared.disruption.expiration import Expiring, expiration
from shared.disruption.method import EVENTUAL, GRACEFUL, Round
from shared.disruption.overlimit import REASON as OVER_LIMIT
from shared.disruption.passes import BUDGET, NODE_HARD_LIMIT, forceful, graceful
from shared.disruption.pricing import NOT_CHEAPER as NOT_CHEAPER_TEXT
from shared.disruption.pricing import worst_price
from shared.disruption.simulation import simulate
from shared.disruption.singlenode import SingleNodeConsolidation
from shared.disruption.world import Node, World, consolidatable_from
from shared.explain import model as m
from shared.explain.budgets import budget_at, told
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import blocked_by_node_limit_message

EXPIRATION, OVERLIMIT, EMPTINESS, DRIFT, CONSOLIDATION = (
    "Expiration",
    "OverLimit",
    "Emptiness",
    "Drift",
    "Consolidation",
)
_SHOWN_PODS = 5


class Asked:
    """One claim of one world, and what the core says of it."""

    def __init__(self, world: World, node: Node, pool: NodePool | None, disrupting: int) -> None:
        self.world, self.node, self.pool = world, node, pool
        self.name = node.state.nodeclaim
        self.round = Round(world)
        self.rules = world.pools.get(node.state.nodepool)
        self.disrupting = disrupting
        self.budgets: dict[str, m.Budget] = {}

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


def verdicts(asked: Asked) -> list[m.Verdict]:
    return [expired(asked), over_limit(asked), empty(asked), drifted(asked), consolidation(asked)]


def expired(asked: Asked) -> m.Verdict:
    facts, state = asked.node.facts, asked.node.state
    claim = Expiring(facts.name, facts.created_at, facts.expire_after, facts.deleting or state.deleting)
    reason = "Expired"
    if expiration([claim], asked.world.now) is not None:
        return m.Verdict(
            method=EXPIRATION,
            reason=reason,
            applies=True,
            disrupts=True,
            message=f"expired at {_t(claim.expires_at)} (expireAfter {span(facts.expire_after)}): "
            "forceful, no budget applies",
        )
    if claim.expires_at is None:
        return _no(EXPIRATION, reason, m.NEVER_EXPIRES, "expireAfter is Never")
    return _no(
        EXPIRATION, reason, m.NOT_EXPIRED, f"expires at {_t(claim.expires_at)} (expireAfter {span(facts.expire_after)})"
    )


def over_limit(asked: Asked) -> m.Verdict:
    rules, pool = asked.rules, asked.node.state.nodepool
    taken = any(f.command.reason == OVER_LIMIT and asked.name in f.command.candidates for f in forceful(asked.world))
    if taken:
        return m.Verdict(
            method=OVERLIMIT,
            reason=OVER_LIMIT,
            applies=True,
            disrupts=True,
            message=f"nodepool {pool} is over limits.nodes and this claim goes first: forceful, no budget applies",
        )
    if rules is None or rules.node_limit.limit is None:
        return _no(OVERLIMIT, OVER_LIMIT, m.NO_NODE_LIMIT, f"nodepool {pool} has no limits.nodes")
    limit = rules.node_limit
    figures = f"{limit.nodes} node(s), limits.nodes {limit.limit}"
    if limit.excess == 0:
        return _no(OVERLIMIT, OVER_LIMIT, m.WITHIN_LIMIT, f"nodepool {pool} is within its node limit: {figures}")
    if rules.busy:
        return _no(OVERLIMIT, OVER_LIMIT, m.BUSY, f"{figures}; a graceful command of the pool is under way", True)
    return _no(OVERLIMIT, OVER_LIMIT, m.NOT_CHOSEN, f"{figures}; the excess goes in the over-limit order", True)


def empty(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.EMPTY
    found = asked.candidate(GRACEFUL)
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, EMPTINESS, reason, found)
    if not found.empty:
        return _no(EMPTINESS, reason, m.NOT_EMPTY, _pods(found))
    rules = asked.world.pools[found.nodepool]
    said = emptiness(
        [found],
        remaining=asked.remaining(reason),
        disabled=lambda _: rules.consolidate_after is None,
        consolidatable=asked.round.consolidatable,
    )
    if said.command is not None:
        return m.Verdict(
            method=EMPTINESS, reason=str(reason), applies=True, disrupts=True, message="empty and Consolidatable"
        )
    if asked.name in said.unconsolidatable:
        return _no(EMPTINESS, reason, m.CONSOLIDATION_DISABLED, said.unconsolidatable[asked.name], True)
    if said.budget_blocked:
        blocked = asked.no_budget(EMPTINESS, reason)
        if blocked is not None:
            return blocked
    return _not_yet(asked, EMPTINESS, reason)


def drifted(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.DRIFTED
    node = asked.node
    if not node.drift:
        return _no(DRIFT, reason, m.NOT_DRIFTED, "not drifted: it matches its NodePool and the catalog")
    found = asked.candidate(EVENTUAL)
    details = {"drift": node.drift, "drifted_since": node.drifted_since}
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, DRIFT, reason, found).model_copy(update={"details": details})
    blocked = asked.no_budget(DRIFT, reason)
    if blocked is not None:
        return blocked.model_copy(update={"details": details})
    outcome = Drift().compute_commands(asked.round, asked.remaining(reason), [found])
    if outcome.found:
        command = outcome.found[0].command
        text = (
            f"drifted ({node.drift}): replaced by {command.replacements} new claim(s)" if command.replacements else ""
        )
        return m.Verdict(
            method=DRIFT,
            reason=str(reason),
            applies=True,
            disrupts=True,
            message=text or f"drifted ({node.drift}): deleted, its pods fit elsewhere",
            details=details,
        )
    if outcome.blocked:
        return _no(DRIFT, reason, outcome.blocked[0].cause, outcome.blocked[0].message, True, details)
    if outcome.limited:
        return _no(DRIFT, reason, NODE_HARD_LIMIT, _limited(asked, reason), True, details)
    return _no(DRIFT, reason, m.NO_PRICE, "drifted, but its node, instance or price is not known", True, details)


def consolidation(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.UNDERUTILIZED
    found = asked.candidate(GRACEFUL)
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, CONSOLIDATION, reason, found)
    if found.empty:
        return _no(CONSOLIDATION, reason, m.EMPTY, "empty: Emptiness takes an empty node, not consolidation")
    rules = asked.world.pools[found.nodepool]
    if not movable(asked.round, found):  # the methods' own test; then which part of it failed
        if rules.consolidate_after is None:
            return _no(CONSOLIDATION, reason, m.CONSOLIDATION_DISABLED, disabled_message(found.nodepool), True)
        if not asked.round.consolidatable(found):
            return _not_yet(asked, CONSOLIDATION, reason)
        if rules.when_empty:
            text = f"nodepool {found.nodepool}'s consolidationPolicy is WhenEmpty: a node with pods stays"
            return _no(CONSOLIDATION, reason, m.WHEN_EMPTY, text, True)
        return _no(CONSOLIDATION, reason, m.NO_PRICE, "its instance type, zone or capacity type has no price", True)
    blocked = asked.no_budget(CONSOLIDATION, reason)
    if blocked is not None:
        return blocked
    details = _replacement(asked)
    outcome = SingleNodeConsolidation().compute_commands(asked.round, asked.remaining(reason), [found])
    if outcome.found:
        f = outcome.found[0]
        how = "replaced by a cheaper node" if f.command.replacements else "deleted: its pods fit on the other nodes"
        text = f"{how} (saves {f.savings}/h)" if f.savings is not None else how
        if f.scores:  # Balanced: each pool's score, as the decision records it
            text += "; " + "; ".join(f"nodepool {p} is Balanced: {s.describe()}" for p, s in sorted(f.scores.items()))
            details = {**details, "scores": {p: s.describe() for p, s in sorted(f.scores.items())}}
        return m.Verdict(
            method=CONSOLIDATION, reason=str(reason), applies=True, disrupts=True, message=text, details=details
        )
    if outcome.limited:
        return _no(CONSOLIDATION, reason, NODE_HARD_LIMIT, _limited(asked, reason), True, details)
    why = outcome.unconsolidatable.get(asked.name) or "no command"
    return _no(CONSOLIDATION, reason, _cause_of(why), _with_figures(why, details), True, details)


def _cause_of(why: str) -> str:
    """The cause a single-node consolidation's `Unconsolidatable` words name."""
    if why.startswith("pod "):
        return "Unschedulable"
    if why == NOT_CHEAPER_TEXT:
        return m.NOT_CHEAPER
    if " is Balanced and " in why:
        return m.BALANCED_SCORE
    if why.startswith("SpotToSpot"):
        return m.SPOT_TO_SPOT
    if why.startswith("Can't remove without creating"):
        return m.TOO_MANY_REPLACEMENTS
    if why.startswith("would schedule against uninitialized"):
        return m.UNINITIALIZED_TARGET
    return "Unconsolidatable"


def _with_figures(why: str, details: Mapping[str, Any]) -> str:
    cheapest, price = details.get("cheapest"), details.get("current_price")
    if why == NOT_CHEAPER_TEXT and cheapest is not None:
        best = f"{cheapest['instance_type']} at {cheapest['price']}/h"
        return f"{why}: the cheapest that holds its pods is {best}, against {price}/h now"
    unplaced = details.get("unschedulable") or {}
    if unplaced:
        shown = "; ".join(f"{pod}: {r}" for pod, r in list(unplaced.items())[:_SHOWN_PODS])
        more = f" (and {len(unplaced) - _SHOWN_PODS} more)" if len(unplaced) > _SHOWN_PODS else ""
        return f"{why}; pods that fit nowhere else: {shown}{more}"
    return why


def _replacement(asked: Asked) -> dict[str, Any]:
    """What the consolidation simulation finds for this claim alone: the pods that fit nowhere,
    and the cheapest type of the new node its pods would need, against the claim's price now."""
    moving = asked.node.movable
    if moving is None:
        return {}
    simulation = simulate([moving.move], asked.round.cluster.prepared())
    out: dict[str, Any] = {"current_price": moving.price, "instance_type": moving.instance_type}
    if simulation.unplaced:
        out["unschedulable"] = dict(sorted(simulation.unplaced.items()))
    if len(simulation.new_claims) == 1:
        options = [o for o in simulation.new_claims[0].options if o.offers]
        if options:
            best = min(options, key=lambda o: (worst_price(o), o.instance.name))
            out["cheapest"] = {"instance_type": best.instance.name, "price": worst_price(best)}
    out["new_nodes"] = len(simulation.new_claims)
    return out


def _limited(asked: Asked, reason: DisruptionReason) -> str:
    rules = asked.rules
    text = blocked_by_node_limit_message(reason)
    if rules is not None and rules.node_limit.limit is not None:
        limit = rules.node_limit
        text += f": {limit.nodes} node(s), limits.nodes {limit.limit} leaves no room for a replacement"
    return text


def _not_a_candidate(asked: Asked, method: str, reason: DisruptionReason, found: Blocked | None) -> m.Verdict:
    if isinstance(found, Blocked):
        return _no(method, reason, found.cause, found.message, True)
    if not asked.node.state.initialized:
        return _no(method, reason, m.NOT_INITIALIZED, "not initialized yet", True)
    return _no(method, reason, m.DELETING, "already going: its deletion is asked for or a command takes it", True)


def _not_yet(asked: Asked, method: str, reason: DisruptionReason) -> m.Verdict:
    """Not Consolidatable: when it will be, and since what."""
    node = asked.node
    at = consolidatable_from(asked.world, node)
    rules = asked.rules
    after = rules.consolidate_after if rules is not None else None
    since = (
        f"its last pod event at {_t(node.last_pod_event)}"
        if node.last_pod_event is not None
        else f"its initialization at {_t(node.initialized_at)}"
    )
    if at is None:
        return _no(method, reason, m.CONSOLIDATION_DISABLED, disabled_message(node.state.nodepool), True)
    wait = at - asked.world.now
    text = f"not consolidatable until {_t(at)} (in {span(wait)}): consolidateAfter {span(after)} after {since}"
    return _no(method, reason, m.NOT_CONSOLIDATABLE, text, True, {"consolidatable_at": at})


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


def _t(at: datetime | None) -> str:
    return at.isoformat() if at is not None else "-"


def _pods(found: Candidate) -> str:
    keys = [p.key for p in found.reschedulable]
    shown = ", ".join(keys[:_SHOWN_PODS]) + (f" and {len(keys) - _SHOWN_PODS} more" if len(keys) > _SHOWN_PODS else "")
    return f"not empty: {len(keys)} pod(s) would need a place elsewhere ({shown})"


def _no(
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


def passed(world: World) -> list[m.Command]:
    """What the whole pass decides at the world's instant: the forceful commands, then the
    first graceful method's (`passes.forceful`, `passes.graceful`)."""
    return [
        m.Command(
            reason=str(f.command.reason),
            nodepool=f.nodepool,
            candidates=list(f.command.candidates),
            replacements=f.command.replacements,
            consolidation_type=f.consolidation_type,
        )
        for f in [*forceful(world), *graceful(world).found]
    ]
