"""One disruption pass (upstream's `pkg/controllers/disruption/controller.go`): the forceful methods
(expiration, removal above a lowered node limit, and node repair behind its gate) for every pool,
then the graceful methods
(`method.Method`) in upstream's order (Emptiness, Drift, Multi-node, Single-node) where the first
that yields a command ends the pass; and the re-check a graceful command passes before it is
carried out (`recheck`).

The caller (the disruption service) builds a `World` (`world`) from its projection and the live
counters; everything here is a decision on it, with time a parameter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Blocked
from shared.disruption.consolidatable import disabled_message
from shared.disruption.consolidation import evaluate
from shared.disruption.drift import Drift
from shared.disruption.emptiness import Emptiness
from shared.disruption.expiration import Expiring, expiration
from shared.disruption.method import GRACEFUL, Found, Method, Round
from shared.disruption.multinode import MultiNodeConsolidation
from shared.disruption.overlimit import over_limit
from shared.disruption.repair import Sick, repairs
from shared.disruption.simulation import simulate
from shared.disruption.singlenode import SingleNodeConsolidation
from shared.disruption.static import scale_down
from shared.disruption.static_drift import StaticDrift, static_replacement
from shared.disruption.validation import validate
from shared.disruption.world import Node, World, candidates_of, is_consolidatable, with_waiting
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import blocked_by_node_limit_message
from shared.scheduling.values import PlannedClaim

BUDGET = "Budget"
NODE_HARD_LIMIT = "NodeHardLimit"

METHODS: tuple[Method, ...] = (
    Emptiness(),
    StaticDrift(),
    Drift(),
    MultiNodeConsolidation(),
    SingleNodeConsolidation(),
)
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
    unconsolidatable: dict[str, str] = field(default_factory=dict)
    """NodeClaim -> why consolidation keeps it: its pool's consolidateAfter is Never, or single-node
    consolidation looked at it and found nothing (upstream's `Unconsolidatable`)."""
    durations: list[tuple[DisruptionReason, str, float]] = field(default_factory=list)
    """Per method asked, in order: its reason, consolidation type and seconds on the caller's
    clock (upstream's decision_evaluation_duration_seconds); empty without a clock."""
    waited: bool = False
    """No method was asked: a graceful command awaits its re-check (`World.validating`), so
    nothing was found, blocked or kept this time."""


def forceful(world: World) -> list[Found]:
    """Expiration, a static pool's scale-down to its replicas and removal above `limits.nodes`,
    per pool: none is gated by budgets."""
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
        surplus = scale_down(facts, rules.replicas, world.now) if world.static_capacity else None
        if surplus is not None:
            out.append(Found(surplus, name))
            gone |= set(surplus.candidates)
            facts = [f for f in facts if f.name not in gone]
        excess = over_limit(facts, rules.node_limit.limit, world.now)
        if excess is not None:
            out.append(Found(excess, name))
    return out


def repair(world: World, taken: Collection[str] = ()) -> tuple[list[Found], list[tuple[str, str]]]:
    """Node repair (`repair`): a forceful command per node unhealthy past its policy's toleration,
    and the (claim, pool) its pool's unhealthy threshold holds back; nothing while the gate is
    off (no policies). `taken`: claims an earlier forceful command already removes."""
    if not world.repair_policies:
        return [], []
    registered = [n for n in world.nodes if n.state.initialized]  # the nodes the audit counts too
    pool_nodes = Counter(n.state.nodepool for n in registered)
    sick = [
        Sick(n.state.nodeclaim, n.state.nodepool, n.conditions)
        for n in registered
        if n.conditions and not n.state.deleting and n.state.nodeclaim not in taken
    ]
    found = repairs(sick, pool_nodes, world.repair_policies, world.now)
    commands = [Found(command, pool, unhealthy=evidence) for command, pool, evidence in found.commands]
    return commands, list(found.blocked)


def graceful(world: World, clock: Callable[[], float] | None = None) -> Pass:
    """The first of `METHODS` that yields a command, each asked about the candidates it would
    disrupt, within what its reason's budgets have left (upstream's `Controller.Reconcile`).
    `clock` (seconds, monotonic) times each method asked; time stays the caller's to read."""
    result = Pass()
    if world.validating:
        result.waited = True
        return result
    for rules in world.pools.values():
        for reason in REASONS:
            if rules.nodes > 0 and rules.allowed.get(reason) == 0:
                result.pool_blocked.append(PoolBlocked(rules.name, reason, BUDGET, blocked_by_budget_message(reason)))
    round_ = Round(world)
    result.blocked += round_.blocked(GRACEFUL)
    for candidate in round_.candidates(GRACEFUL):
        rules = world.pools.get(candidate.nodepool)
        if rules is not None and rules.consolidate_after is None:
            result.unconsolidatable[candidate.nodeclaim] = disabled_message(candidate.nodepool)
    for method in METHODS:
        started = clock() if clock is not None else 0.0
        chosen = [c for c in round_.candidates(method.disruption_class) if method.should_disrupt(round_, c)]
        result.eligible[method.reason] = result.eligible.get(method.reason, 0) + len(chosen)  # both drifts
        if not chosen:
            _timed(result, method, clock, started)
            continue
        budgets = {p: r.remaining.get(method.reason) for p, r in world.pools.items()}
        outcome = method.compute_commands(round_, budgets, chosen)
        _timed(result, method, clock, started)
        _limited(result, outcome.limited, method.reason)
        result.blocked += outcome.blocked
        result.unconsolidatable.update(outcome.unconsolidatable)
        if outcome.found:
            result.found += outcome.found
            return result
    return result


def _timed(result: Pass, method: Method, clock: Callable[[], float] | None, started: float) -> None:
    if clock is not None:
        result.durations.append((method.reason, method.consolidation_type, clock() - started))


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
    pools: Sequence[str] = (),
) -> Recheck:
    """A graceful command before it is carried out (upstream's
    `pkg/controllers/disruption/validation.go`, and our stale check): `moved` are the candidates
    whose streams moved since the decision. Emptiness keeps the candidates still empty and
    Consolidatable; consolidation and drift are all or nothing, and their simulation must still give
    the same decision, whose new claims the command launches. `pools`: the pool of each of the
    decision's replacements (empty: not asked); the new claims must go to the same pools, since
    each replacement's name and reservation are its pool's."""
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
    static = {by_name[name].state.nodepool for name in verdict.keep if _static(world, by_name[name])}
    if eventual and static:  # one static pool's node, replaced one-for-one (`static_drift`)
        claim = static_replacement(world, next(iter(static)))
        if claim is None or replacements != 1 or len(verdict.keep) != 1:
            return Recheck((), {name: "scheduling" for name in verdict.keep})
        return Recheck(verdict.keep, {}, (claim,))
    movables = [by_name[name].movable for name in verdict.keep]
    if any(m is None for m in movables):
        return Recheck((), {name: "churn" for name in verdict.keep})
    chosen = [m for m in movables if m is not None]
    cluster = with_waiting(world)
    if eventual:
        simulation = simulate([m.move for m in chosen], cluster)
        if not simulation.valid or len(simulation.new_claims) != replacements or not _same(simulation.pools, pools):
            return Recheck((), {name: "scheduling" for name in verdict.keep})
        return Recheck(verdict.keep, {}, simulation.new_claims)
    again = evaluate(chosen, cluster.prepared(), spot_to_spot=world.spot_to_spot, multi=len(chosen) > 1)
    again_pools = (again.planned.nodepool,) if again.planned is not None else ()
    if again.command is None or again.command.replacements != replacements or not _same(again_pools, pools):
        return Recheck((), {name: "scheduling" for name in verdict.keep})
    if again.planned is None:
        return Recheck(verdict.keep, {})
    return Recheck(verdict.keep, {}, (again.planned,))  # only the cheaper types launch, pinned (`pricing.pinned`)


def _static(world: World, node: Node) -> bool:
    rules = world.pools.get(node.state.nodepool)
    return rules is not None and rules.replicas is not None


def _same(planned: Sequence[str], decided: Sequence[str]) -> bool:
    """Whether a re-check's new claims go to the pools the decision named (none named: any)."""
    return not decided or sorted(planned) == sorted(decided)
