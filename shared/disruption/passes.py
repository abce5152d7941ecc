"""One disruption pass (upstream's `pkg/controllers/disruption/controller.go`): the forceful methods
(expiration, removal above a lowered node limit) for every pool, then the graceful methods in
upstream's order (Emptiness, Drift, Multi-node, Single-node) where the first that yields a command
ends the pass; and the re-check a graceful command passes before it is carried out (`recheck`).

The caller (the disruption service) builds a `World` from its projection and the live counters;
everything here is a decision on it, with time a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Blocked, Candidate, NodeState, candidate
from shared.disruption.command import Command
from shared.disruption.consolidatable import consolidatable_at
from shared.disruption.consolidation import Movable, evaluate, multi_node, single_node
from shared.disruption.drift import DriftedClaim, drift_command, drift_order
from shared.disruption.emptiness import emptiness
from shared.disruption.expiration import Expiring, expiration
from shared.disruption.order import by_disruption_cost
from shared.disruption.overlimit import over_limit
from shared.disruption.pdbs import Pdb
from shared.disruption.simulation import ClusterView, simulate
from shared.disruption.validation import validate
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import NodeLimit, blocked_by_node_limit_message
from shared.policy.overlimit import ClaimFacts
from shared.scheduling.values import PlannedClaim

BUDGET = "Budget"
NODE_HARD_LIMIT = "NodeHardLimit"
GRACEFUL = (DisruptionReason.EMPTY, DisruptionReason.DRIFTED, DisruptionReason.UNDERUTILIZED)


@dataclass(frozen=True, slots=True)
class PoolRules:
    name: str
    consolidate_after: timedelta | None
    """None: Never (no emptiness, no consolidation)."""
    when_empty: bool
    """consolidationPolicy WhenEmpty: a node with pods is never consolidated."""
    nodes: int
    """The nodes its budgets count (initialized, not terminated)."""
    allowed: Mapping[str, int | None]
    remaining: Mapping[str, int | None]
    """Per reason, what its budgets allow now, and what is left after those disrupting."""
    node_limit: NodeLimit
    busy: bool = False
    """A graceful command of this pool is under way: over-limit removal waits for it."""


@dataclass(frozen=True, slots=True)
class Node:
    """A claim as a pass weighs it."""

    state: NodeState
    facts: ClaimFacts
    """Its creation, expiry and pods, for the cost order and the over-limit order."""
    initialized_at: datetime | None = None
    last_pod_event: datetime | None = None
    movable: Movable | None = None
    """Its pods and price, once its node and instance are known."""
    drift: str | None = None
    drifted_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class World:
    now: datetime
    pools: Mapping[str, PoolRules]
    nodes: Sequence[Node]
    cluster: ClusterView
    pdbs: Sequence[Pdb] = ()
    pdb_allowed: Mapping[str, int] = field(default_factory=dict)
    spot_to_spot: bool = False


@dataclass(frozen=True, slots=True)
class Found:
    """A command, with what the decision needs to record and a replace needs to launch."""

    command: Command
    nodepool: str
    consolidation_type: str = ""
    savings: float | None = None
    new_claims: tuple[PlannedClaim, ...] = ()

    @property
    def forceful(self) -> bool:
        return self.command.reason in FORCEFUL_REASONS


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
    """The first of Emptiness, Drift, Multi-node and Single-node that yields a command."""
    result = Pass()
    for rules in world.pools.values():
        for reason in GRACEFUL:
            if rules.nodes > 0 and rules.allowed.get(reason) == 0:
                result.pool_blocked.append(PoolBlocked(rules.name, reason, BUDGET, blocked_by_budget_message(reason)))
    by_name = {n.state.nodeclaim: n for n in world.nodes}
    plain = _candidates(world, result, eventual=False)
    rank = {
        name: i for i, name in enumerate(by_disruption_cost([by_name[c.nodeclaim].facts for c in plain], world.now))
    }
    ranked = sorted(plain, key=lambda c: rank[c.nodeclaim])

    def ready(c: Candidate) -> bool:
        return _consolidatable(world, by_name[c.nodeclaim])

    empty = [c for c in ranked if c.empty]
    result.eligible[DisruptionReason.EMPTY] = sum(1 for c in empty if ready(c))
    found = emptiness(
        ranked,
        remaining={p: r.remaining.get(DisruptionReason.EMPTY) for p, r in world.pools.items()},
        disabled=lambda pool: world.pools[pool].consolidate_after is None,
        consolidatable=ready,
    )
    if found.command is not None:
        for pool in dict.fromkeys(by_name[c].state.nodepool for c in found.command.candidates):
            mine = tuple(c for c in found.command.candidates if by_name[c].state.nodepool == pool)
            result.found.append(Found(Command(found.command.reason, mine), pool, "empty"))
        return result
    cluster = _with_waiting(world)
    if _drift(world, result, by_name, cluster):
        return result
    movable = [
        by_name[c.nodeclaim].movable
        for c in ranked
        if not c.empty
        and ready(c)
        and not world.pools[c.nodepool].when_empty
        and by_name[c.nodeclaim].movable is not None
    ]
    moves = [m for m in movable if m is not None]
    result.eligible[DisruptionReason.UNDERUTILIZED] = len(moves)
    remaining = {p: r.remaining.get(DisruptionReason.UNDERUTILIZED) for p, r in world.pools.items()}
    for pool in dict.fromkeys(m.nodepool for m in moves):
        multi = multi_node(
            [m for m in moves if m.nodepool == pool],
            cluster,
            remaining,
            spot_to_spot=world.spot_to_spot,
            replaceable=lambda p, n: _replaceable(world, p, n),
        )
        _limited(result, multi.limited, DisruptionReason.UNDERUTILIZED)
        if multi.command is not None:
            result.found.append(_consolidation(multi.command, pool, "multi", moves, multi.planned))
            return result
    single = single_node(
        moves, cluster, remaining, spot_to_spot=world.spot_to_spot, replaceable=lambda p, n: _replaceable(world, p, n)
    )
    _limited(result, single.limited, DisruptionReason.UNDERUTILIZED)
    if single.command is not None:
        pool = by_name[single.command.candidates[0]].state.nodepool
        result.found.append(_consolidation(single.command, pool, "single", moves, single.planned))
    return result


def _candidates(world: World, result: Pass, *, eventual: bool) -> list[Candidate]:
    out = []
    for node in world.nodes:
        verdict = candidate(
            node.state,
            pools=world.pools.keys(),
            pdbs=world.pdbs,
            allowed=world.pdb_allowed,
            now=world.now,
            eventual=eventual,
        )
        if isinstance(verdict, Candidate):
            out.append(verdict)
        elif isinstance(verdict, Blocked) and not eventual:
            result.blocked.append(verdict)
    return out


def _with_waiting(world: World) -> ClusterView:
    """The cluster without the nodes inside their consolidateAfter window (`simulation`)."""
    waiting = set()
    for node in world.nodes:
        at = _consolidatable_at(world, node)
        if node.state.node is not None and at is not None and world.now < at:
            waiting.add(node.state.node)
    return replace(world.cluster, waiting=frozenset(waiting))


def _consolidatable_at(world: World, node: Node) -> datetime | None:
    rules = world.pools.get(node.state.nodepool)
    if rules is None:
        return None
    return consolidatable_at(rules.consolidate_after, node.initialized_at or world.now, node.last_pod_event)


def _consolidatable(world: World, node: Node) -> bool:
    at = _consolidatable_at(world, node)
    return at is not None and world.now >= at


def _drift(world: World, result: Pass, by_name: Mapping[str, Node], cluster: ClusterView) -> bool:
    drifted = [c for c in _candidates(world, Pass(), eventual=True) if by_name[c.nodeclaim].drift]
    result.eligible[DisruptionReason.DRIFTED] = len(drifted)
    if not drifted:
        return False
    ordered = drift_order(
        [DriftedClaim(c.nodeclaim, c.empty, by_name[c.nodeclaim].drifted_since or world.now) for c in drifted]
    )
    movables = [m for name in ordered if (m := by_name[name].movable) is not None]
    decision = drift_command(
        movables,
        cluster,
        {p: r.remaining.get(DisruptionReason.DRIFTED) for p, r in world.pools.items()},
        replaceable=lambda p, n: _replaceable(world, p, n),
    )
    _limited(result, decision.limited, DisruptionReason.DRIFTED)
    for name, why in decision.blocked.items():
        node = by_name[name]
        result.blocked.append(Blocked(name, node.state.node, "Unschedulable", f"Cannot disrupt NodeClaim: {why}"))
    if decision.command is None:
        return False
    pool = by_name[decision.command.candidates[0]].state.nodepool
    result.found.append(Found(decision.command, pool, "", None, decision.new_claims))
    return True


def _replaceable(world: World, pool: str, replacements: int) -> bool:
    rules = world.pools.get(pool)
    return rules is not None and not rules.node_limit.blocks_replacements(replacements)


def _limited(result: Pass, pools: Sequence[str], reason: DisruptionReason) -> None:
    for pool in pools:
        result.pool_blocked.append(PoolBlocked(pool, reason, NODE_HARD_LIMIT, blocked_by_node_limit_message(reason)))


def _consolidation(
    command: Command, pool: str, kind: str, moves: Sequence[Movable], planned: PlannedClaim | None
) -> Found:
    prices = {m.nodeclaim: m.price for m in moves}
    before = sum(prices[c] for c in command.candidates)
    after = min((o.price for o in planned.options), default=0.0) if planned is not None else 0.0
    claims = (planned,) if planned is not None else ()
    return Found(command, pool, kind, round(before - after, 6), claims)


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
    valid = {c.nodeclaim: c for c in _candidates(world, Pass(), eventual=eventual)}
    still: list[str] = []
    for name in candidates:
        found = valid.get(name)
        if found is None:
            continue
        if reason == DisruptionReason.EMPTY and not (found.empty and _consolidatable(world, by_name[name])):
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
    cluster = _with_waiting(world)
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
