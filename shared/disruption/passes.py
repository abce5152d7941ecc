"""One disruption pass (upstream's `pkg/controllers/disruption/controller.go`): the forceful methods
(expiration, removal above a lowered node limit) for every pool, then the graceful methods
(`method.Method`) in upstream's order (Emptiness, Drift, Multi-node, Single-node) where the first
that yields a command ends the pass; and the re-check a graceful command passes before it is
carried out (`recheck`).

The caller (the disruption service) builds a `World` (`world`) from its projection and the live
counters; everything here is a decision on it, with time a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Blocked
from shared.disruption.consolidation import evaluate
from shared.disruption.drift import Drift
from shared.disruption.emptiness import Emptiness
from shared.disruption.expiration import Expiring, expiration
from shared.disruption.method import GRACEFUL, Found, Method, Round
from shared.disruption.multinode import MultiNodeConsolidation
from shared.disruption.overlimit import over_limit
from shared.disruption.simulation import simulate
from shared.disruption.singlenode import SingleNodeConsolidation
from shared.disruption.validation import validate
from shared.disruption.world import Node, World, candidates_of, is_consolidatable, with_waiting
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import blocked_by_node_limit_message
from shared.scheduling.values import PlannedClaim

BUDGET = "Budget"
NODE_HARD_LIMIT = "NodeHardLimit"

METHODS: tuple[Method, ...] = (Emptiness(), Drift(), MultiNodeConsolidation(), SingleNodeConsolidation())
"""The graceful methods in upstream's order (`NewMethods`): the cheapest disruption first."""
REASONS = tuple(dict.fromkeys(m.reason for m in METHODS))
"""Their budget reasons: Empty, Drifted, Underutilized."""


@dataclass(frozen=True, slots=True)
class PoolBlocked:
    nodepool: str
    reason: str
    cause: str
    message: str


@dataclass(slots=True)
class Pass:
    found: list[Found] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    pool_blocked: list[PoolBlocked] = field(default_factory=list)
    eligible: dict[str, int] = field(default_factory=dict)
    """Per graceful reason, the candidates it could have taken (upstream's eligible_nodes)."""


def forceful(world: World) -> list[Found]:
    """Expiration and removal above `limits.nodes`, per pool: neither is gated by budgets."""
    out: list[Found] = []
    by_pool: dict[str, list[Node]] = {}
    for node in world.nodes:
        by_pool.setdefault(node.state.nodepool, []).append(node)
    for name in sorted(by_pool):
        nodes = by_pool[name]
        expiring = [
            Expiring(n.facts.name, n.facts.created_at, n.facts.expire_after, n.facts.deleting or n.state.deleting)
            for n in nodes
        ]
        expired = expiration(expiring, world.now)
        if expired is not None:
            out.append(Found(expired, name))
        rules = world.pools.get(name)
        if rules is None or rules.busy:
            continue
        gone = set(expired.candidates) if expired else set()
        facts = [n.facts for n in nodes if n.facts.name not in gone]
        excess = over_limit(facts, rules.node_limit.limit, world.now)
        if excess is not None:
            out.append(Found(excess, name))
    return out


def graceful(world: World) -> Pass:
    """The first of `METHODS` that yields a command, each asked about the candidates it would
    disrupt, within what its reason's budgets have left (upstream's `Controller.Reconcile`)."""
    result = Pass()
    for rules in world.pools.values():
        for reason in REASONS:
            if rules.nodes > 0 and rules.allowed.get(reason) == 0:
                result.pool_blocked.append(PoolBlocked(rules.name, reason, BUDGET, blocked_by_budget_message(reason)))
    round_ = Round(world)
    result.blocked += round_.blocked(GRACEFUL)
    for method in METHODS:
        chosen = [c for c in round_.candidates(method.disruption_class) if method.should_disrupt(round_, c)]
        result.eligible[method.reason] = len(chosen)
        if not chosen:
            continue
        budgets = {p: r.remaining.get(method.reason) for p, r in world.pools.items()}
        outcome = method.compute_commands(round_, budgets, chosen)
        _limited(result, outcome.limited, method.reason)
        result.blocked += outcome.blocked
        if outcome.found:
            result.found += outcome.found
            return result
    return result


def _limited(result: Pass, pools: Sequence[str], reason: DisruptionReason) -> None:
    for pool in pools:
        result.pool_blocked.append(PoolBlocked(pool, reason, NODE_HARD_LIMIT, blocked_by_node_limit_message(reason)))


@dataclass(frozen=True, slots=True)
class Recheck:
    keep: tuple[str, ...]
    dropped: Mapping[str, str]
    new_claims: tuple[PlannedClaim, ...] = ()

    @property
    def cancelled(self) -> bool:
        return not self.keep


def recheck(
    world: World,
    *,
    reason: str,
    candidates: Sequence[str],
    replacements: int,
    moved: Sequence[str],
) -> Recheck:
    """A graceful command before it is carried out (upstream's
    `pkg/controllers/disruption/validation.go`, and our stale check): `moved` are the candidates
    whose streams moved since the decision. Emptiness keeps the candidates still empty and
    Consolidatable; consolidation and drift are all or nothing, and their simulation must still give
    the same decision, whose new claims the command launches."""
    by_name = {n.state.nodeclaim: n for n in world.nodes}
    eventual = reason == DisruptionReason.DRIFTED
    valid = {c.nodeclaim: c for c in candidates_of(world, eventual=eventual)[0]}
    still: list[str] = []
    for name in candidates:
        found = valid.get(name)
        if found is None:
            continue
        if reason == DisruptionReason.EMPTY and not (found.empty and is_consolidatable(world, by_name[name])):
            continue
        still.append(name)
    verdict = validate(
        candidates,
        moved=moved,
        still_valid=still,
        within_budget=candidates,  # the reservation holds their budget
        partial=reason == DisruptionReason.EMPTY,
    )
    if verdict.cancelled or reason == DisruptionReason.EMPTY:
        return Recheck(verdict.keep, verdict.rejected)
    movables = [by_name[name].movable for name in verdict.keep]
    if any(m is None for m in movables):
        return Recheck((), {name: "churn" for name in verdict.keep})
    chosen = [m for m in movables if m is not None]
    cluster = with_waiting(world)
    if eventual:
        simulation = simulate([m.move for m in chosen], cluster)
        pools = {m.nodepool for m in chosen}
        if not simulation.valid or len(simulation.new_claims) != replacements or simulation.elsewhere(pools):
            return Recheck((), {name: "scheduling" for name in verdict.keep})
        return Recheck(verdict.keep, {}, simulation.new_claims)
    again = evaluate(chosen, cluster.prepared(), spot_to_spot=world.spot_to_spot, multi=len(chosen) > 1)
    if again.command is None or again.command.replacements != replacements:
        return Recheck((), {name: "scheduling" for name in verdict.keep})
    if again.planned is None or again.replacement is None:
        return Recheck(verdict.keep, {})
    cheaper = replace(again.planned, options=list(again.replacement.options))  # only the cheaper types launch
    return Recheck(verdict.keep, {}, (cheaper,))
