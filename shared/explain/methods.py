"""Each disruption method asked about one claim of a `World`, in the pass's order (the forceful
Expiration, a static pool's Overprovisioned scale-down, OverLimit and node repair, then the
graceful Emptiness, StaticDrift, Drift and Consolidation), and the answer told with its cause.

Every verdict is the disruption core's own: the candidate check (`candidates.candidate`, through
`Round`), `expiration`, `forceful`'s scale-down and over-limit removal, `repair`, `emptiness`, and
the `StaticDrift`, `Drift` and `SingleNodeConsolidation` methods' `compute_commands` given this
claim alone within its pool's budget. The world carries the feature gates (`static_capacity`,
`repair_policies`, `spot_to_spot`): a method behind a gate that is off is not asked, as the pass
does not ask it. Nothing here decides; it picks the claim out of what the core said and adds the figures
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
from shared.disruption.expiration import REASON as EXPIRED
from shared.disruption.expiration import Expiring, expiration
from shared.disruption.method import EVENTUAL, GRACEFUL, Round
from shared.disruption.overlimit import REASON as OVER_LIMIT
from shared.disruption.passes import BUDGET, NODE_HARD_LIMIT, forceful, graceful, repair
from shared.disruption.pricing import NOT_CHEAPER as NOT_CHEAPER_TEXT
from shared.disruption.pricing import worst_price
from shared.disruption.repair import REPAIR_BLOCKED, REPAIR_BLOCKED_MESSAGE, UNHEALTHY, unhealthy
from shared.disruption.simulation import simulate
from shared.disruption.singlenode import SingleNodeConsolidation
from shared.disruption.static import REASON as OVERPROVISIONED_REASON
from shared.disruption.static_drift import StaticDrift
from shared.disruption.world import Node, World, consolidatable_from
from shared.explain import model as m
from shared.explain.budgets import budget_at, told
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import blocked_by_node_limit_message
from shared.policy.overlimit import is_empty
from shared.policy.pods import do_not_disrupt_active
from shared.policy.unhealthy import ALLOWED_UNHEALTHY_PERCENT, unhealthy_threshold

EXPIRATION, OVERLIMIT, EMPTINESS, DRIFT, CONSOLIDATION = (
    "Expiration",
    "OverLimit",
    "Emptiness",
    "Drift",
    "Consolidation",
)
SCALE_DOWN, NODE_REPAIR, STATIC_DRIFT = "StaticScaleDown", "NodeRepair", "StaticDrift"
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


def verdicts(asked: Asked) -> list[m.Verdict]:
    """In the pass's order (`passes.forceful`, `passes.repair`, `passes.METHODS`); the gated and
    the static-only methods only where the pass would ask them of this claim."""
    out = [expired(asked)]
    if asked.world.static_capacity and asked.rules is not None and asked.rules.replicas is not None:
        out.append(overprovisioned(asked, asked.rules.replicas))
    out.append(over_limit(asked))
    if asked.world.repair_policies:
        out.append(repaired(asked))
    out.append(empty(asked))
    if asked.static:
        out.append(static_drifted(asked))
    out += [drifted(asked), consolidation(asked)]
    return out


def expired(asked: Asked) -> m.Verdict:
    facts, state = asked.node.facts, asked.node.state
    claim = Expiring(facts.name, facts.created_at, facts.expire_after, facts.deleting or state.deleting)
    reason = EXPIRED
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


def overprovisioned(asked: Asked, replicas: int) -> m.Verdict:
    """The static scale-down (`static.scale_down` in `passes.forceful`): whether the claim is in
    the surplus now, where upstream's order puts it, or why not (no surplus, a command under way,
    others first). The counts are the ones `scale_down` weighs: claims not being deleted, less
    those expiring in the same pass."""
    pool, name, busy = asked.node.state.nodepool, asked.name, asked.rules is not None and asked.rules.busy
    reason = OVERPROVISIONED_REASON
    expiring = {
        c for f in asked.forceful if f.nodepool == pool and f.command.reason == EXPIRED for c in f.command.candidates
    }
    counted = sorted(
        n.facts.name
        for n in asked.world.nodes
        if n.state.nodepool == pool and not n.facts.deleting and n.facts.name not in expiring
    )
    order = next(
        (list(f.command.candidates) for f in asked.forceful if f.nodepool == pool and f.command.reason == reason), []
    )
    surplus = max(len(counted) - replicas, 0)
    figures = f"nodepool {pool} has {len(counted)} NodeClaim(s) not being deleted, replicas {replicas}"
    details = {"replicas": replicas, "count": len(counted), "surplus": surplus, "order": order}
    if name in order:
        rank = order.index(name) + 1
        return m.Verdict(
            method=SCALE_DOWN,
            reason=reason,
            applies=True,
            disrupts=True,
            message=f"{figures}: the surplus of {surplus} goes now, in upstream's order (not launched, empty, "
            f"cheapest to disrupt, do-not-disrupt last), and this claim is {rank} of {len(order)} "
            f"({_kind(asked)}): forceful, no budget applies",
            details=details,
        )
    if asked.node.facts.deleting:
        return _no(
            SCALE_DOWN, reason, m.DELETING, f"{figures}: it is being deleted, so it is not counted", False, details
        )
    if name in expiring:
        return _no(SCALE_DOWN, reason, m.DELETING, f"{figures}: Expiration takes it in the same pass", False, details)
    if surplus == 0:
        return _no(
            SCALE_DOWN,
            reason,
            m.WITHIN_REPLICAS,
            f"{figures}: not over its replicas, no surplus to scale down",
            False,
            details,
        )
    if busy:
        text = f"{figures}; a graceful command of the pool is under way: the scale-down waits for it"
        return _no(SCALE_DOWN, reason, m.BUSY, text, True, details)
    text = (
        f"{figures}: the surplus of {surplus} goes in upstream's order (not launched, empty, cheapest to disrupt, "
        f"do-not-disrupt last), and {', '.join(order)} come(s) before this claim ({_kind(asked)})"
    )
    return _no(SCALE_DOWN, reason, m.NOT_CHOSEN, text, True, details)


def _kind(asked: Asked) -> str:
    """Where upstream's scale-down order puts the claim: its class in `overlimit_victims`."""
    facts = asked.node.facts
    if not facts.launched:
        return "not launched"
    if is_empty(facts, asked.world.now):
        return "empty"
    if any(do_not_disrupt_active(p, asked.world.now) for p in facts.pods):
        return "with pods, one of them do-not-disrupt"
    return "with pods"


def repaired(asked: Asked) -> m.Verdict:
    """Node repair (`passes.repair`, behind `NodeRepair`): the condition that matches a repair
    policy and since when, the toleration, and the pool's 20% threshold. The verdict is the
    core's (`repair`'s commands and held-back claims); the figures say why."""
    world, node, name = asked.world, asked.node, asked.name
    pool = node.state.nodepool
    evidence = unhealthy(node.conditions, world.repair_policies)
    if evidence is None:
        return _no(NODE_REPAIR, UNHEALTHY, m.HEALTHY, "no condition of its node matches a repair policy")
    taken = {c for f in asked.forceful for c in f.command.candidates}
    registered = [n for n in world.nodes if n.state.initialized and n.state.nodepool == pool]
    matching = sum(  # as `passes.repair` counts them: not going, not taken by another forceful command
        1
        for n in registered
        if not n.state.deleting
        and n.state.nodeclaim not in taken
        and unhealthy(n.conditions, world.repair_policies) is not None
    )
    threshold = unhealthy_threshold(len(registered))
    said = f"{evidence.condition} {evidence.status} since {_t(evidence.since)}, tolerated {span(evidence.toleration)}"
    figures = (
        f"{matching} of {len(registered)} node(s) of nodepool {pool} unhealthy, at most {threshold} "
        f"({ALLOWED_UNHEALTHY_PERCENT}%, rounded up) for a repair"
    )
    details = {
        "condition": evidence.condition,
        "status": evidence.status,
        "since": evidence.since,
        "toleration": span(evidence.toleration),
        "due": evidence.due,
        "unhealthy": matching,
        "nodes": len(registered),
        "threshold": threshold,
    }
    found, held = repair(world, taken)
    if any(name in f.command.candidates for f in found):
        text = f"{said}, past it since {_t(evidence.due)}; {figures}: forceful, no budget, PDB or drain"
        return m.Verdict(
            method=NODE_REPAIR, reason=UNHEALTHY, applies=True, disrupts=True, message=text, details=details
        )
    if not node.state.initialized:
        return _no(NODE_REPAIR, UNHEALTHY, m.NOT_INITIALIZED, "not initialized yet", True, details)
    if node.state.deleting or name in taken:
        return _no(NODE_REPAIR, UNHEALTHY, m.DELETING, "already going: another command takes it", True, details)
    if (name, pool) in held:
        return _no(
            NODE_REPAIR, UNHEALTHY, REPAIR_BLOCKED, f"{REPAIR_BLOCKED_MESSAGE}: {said}; {figures}", True, details
        )
    text = f"{said}: repaired from {_t(evidence.due)} if it lasts; {figures}"
    return _no(NODE_REPAIR, UNHEALTHY, m.WITHIN_TOLERATION, text, True, details)


def over_limit(asked: Asked) -> m.Verdict:
    rules, pool = asked.rules, asked.node.state.nodepool
    taken = any(f.command.reason == OVER_LIMIT and asked.name in f.command.candidates for f in asked.forceful)
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
    if asked.static:
        return _static(asked, EMPTINESS, reason)
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


def _static(asked: Asked, method: str, reason: DisruptionReason) -> m.Verdict:
    """A consolidation method and a static pool's claim: never `Consolidatable`
    (`world.consolidatable_from`), so no emptiness or consolidation takes it, as upstream."""
    pool = asked.node.state.nodepool
    replicas = asked.rules.replicas if asked.rules is not None else None
    text = (
        f"nodepool {pool} is static (replicas {replicas}): consolidation never takes its nodes, "
        "its consolidationPolicy and consolidateAfter are ignored, as upstream ignores them"
    )
    return _no(method, reason, m.STATIC_POOL, text)


def static_drifted(asked: Asked) -> m.Verdict:
    """`StaticDrift` (a static pool's drifted node replaced one-for-one from its template), asked
    as the pass asks it: its `compute_commands` on this claim alone within the Drifted budget."""
    reason = DisruptionReason.DRIFTED
    node, rules = asked.node, asked.rules
    if not node.drift:
        return _no(STATIC_DRIFT, reason, m.NOT_DRIFTED, "not drifted: it matches its NodePool and the catalog")
    details = {"drift": node.drift, "drifted_since": node.drifted_since}
    found = asked.candidate(EVENTUAL)
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, STATIC_DRIFT, reason, found).model_copy(update={"details": details})
    blocked = asked.no_budget(STATIC_DRIFT, reason)
    if blocked is not None:
        return blocked.model_copy(update={"details": details})
    outcome = StaticDrift().compute_commands(asked.round, asked.remaining(reason), [found])
    if outcome.found:
        return m.Verdict(
            method=STATIC_DRIFT,
            reason=str(reason),
            applies=True,
            disrupts=True,
            message=f"drifted ({node.drift}): replaced one-for-one by a claim of nodepool "
            f"{found.nodepool}'s template, launched and initialized before it goes",
            details=details,
        )
    if outcome.limited:
        return _no(STATIC_DRIFT, reason, NODE_HARD_LIMIT, _limited(asked, reason), True, details)
    pool = node.state.nodepool
    live = sum(1 for n in asked.world.nodes if n.state.nodepool == pool and not n.state.deleting)
    if rules is not None and rules.replicas is not None and live > rules.replicas:
        text = (
            f"drifted ({node.drift}), but nodepool {pool} has {live} claim(s), replicas {rules.replicas}: "
            "its scale-down comes first"
        )
        return _no(STATIC_DRIFT, reason, m.OVER_REPLICAS, text, True, details)
    text = f"drifted ({node.drift}), but nodepool {pool}'s node class is not Ready: no replacement can launch"
    return _no(STATIC_DRIFT, reason, m.NODE_CLASS_NOT_READY, text, True, details)


def drifted(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.DRIFTED
    node = asked.node
    if not node.drift:
        return _no(DRIFT, reason, m.NOT_DRIFTED, "not drifted: it matches its NodePool and the catalog")
    if asked.static:  # `Drift.should_disrupt` leaves static pools to `StaticDrift`
        text = f"nodepool {node.state.nodepool} is static: StaticDrift replaces its drifted nodes, not Drift"
        return _no(
            DRIFT, reason, m.STATIC_POOL, text, False, {"drift": node.drift, "drifted_since": node.drifted_since}
        )
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
    if asked.static:
        return _static(asked, CONSOLIDATION, reason)
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
    """What the whole pass decides at the world's instant: the forceful commands, node repair's,
    then the first graceful method's (`passes.forceful`, `passes.repair`, `passes.graceful`), in
    the order the disruption service asks them."""
    found = forceful(world)
    repaired_, _ = repair(world, {c for f in found for c in f.command.candidates})  # as the service asks it
    return [
        m.Command(
            reason=str(f.command.reason),
            nodepool=f.nodepool,
            candidates=list(f.command.candidates),
            replacements=f.command.replacements,
            consolidation_type=f.consolidation_type,
        )
        for f in [*found, *repaired_, *graceful(world).found]
    ]
