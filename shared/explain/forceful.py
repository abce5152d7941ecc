"""The forceful methods asked about one claim, in the pass's order: Expiration, a static pool's
Overprovisioned scale-down (`StaticCapacity`), OverLimit and node repair (`NodeRepair`). Each
verdict is the core's own (`passes.forceful`, `passes.repair`); the figures say why."""

from __future__ import annotations

from shared.disruption.expiration import REASON as EXPIRED
from shared.disruption.expiration import Expiring, expiration
from shared.disruption.overlimit import REASON as OVER_LIMIT
from shared.disruption.passes import repair
from shared.disruption.repair import REPAIR_BLOCKED, REPAIR_BLOCKED_MESSAGE, UNHEALTHY, unhealthy
from shared.disruption.static import REASON as OVERPROVISIONED_REASON
from shared.explain import model as m
from shared.explain.asked import (
    EXPIRATION,
    NODE_REPAIR,
    OVERLIMIT,
    SCALE_DOWN,
    Asked,
    disrupted,
    instant,
    not_disrupted,
    span,
)
from shared.policy.overlimit import is_empty
from shared.policy.pods import do_not_disrupt_active
from shared.policy.unhealthy import ALLOWED_UNHEALTHY_PERCENT, unhealthy_threshold


def expired(asked: Asked) -> m.Verdict:
    facts, state = asked.node.facts, asked.node.state
    claim = Expiring(facts.name, facts.created_at, facts.expire_after, facts.deleting or state.deleting)
    reason = EXPIRED
    if expiration([claim], asked.world.now) is not None:
        return disrupted(
            EXPIRATION,
            reason,
            f"expired at {instant(claim.expires_at)} (expireAfter {span(facts.expire_after)}): "
            "forceful, no budget applies",
        )
    if claim.expires_at is None:
        return not_disrupted(EXPIRATION, reason, m.NEVER_EXPIRES, "expireAfter is Never")
    return not_disrupted(
        EXPIRATION,
        reason,
        m.NOT_EXPIRED,
        f"expires at {instant(claim.expires_at)} (expireAfter {span(facts.expire_after)})",
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
        return disrupted(
            SCALE_DOWN,
            reason,
            f"{figures}: the surplus of {surplus} goes now, in upstream's order (not launched, empty, "
            f"cheapest to disrupt, do-not-disrupt last), and this claim is {rank} of {len(order)} "
            f"({_kind(asked)}): forceful, no budget applies",
            details,
        )
    if asked.node.facts.deleting:
        return not_disrupted(
            SCALE_DOWN, reason, m.DELETING, f"{figures}: it is being deleted, so it is not counted", False, details
        )
    if name in expiring:
        return not_disrupted(
            SCALE_DOWN, reason, m.DELETING, f"{figures}: Expiration takes it in the same pass", False, details
        )
    if surplus == 0:
        return not_disrupted(
            SCALE_DOWN,
            reason,
            m.WITHIN_REPLICAS,
            f"{figures}: not over its replicas, no surplus to scale down",
            False,
            details,
        )
    if busy:
        text = f"{figures}; a graceful command of the pool is under way: the scale-down waits for it"
        return not_disrupted(SCALE_DOWN, reason, m.BUSY, text, True, details)
    text = (
        f"{figures}: the surplus of {surplus} goes in upstream's order (not launched, empty, cheapest to disrupt, "
        f"do-not-disrupt last), and {', '.join(order)} come(s) before this claim ({_kind(asked)})"
    )
    return not_disrupted(SCALE_DOWN, reason, m.NOT_CHOSEN, text, True, details)


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
        return not_disrupted(NODE_REPAIR, UNHEALTHY, m.HEALTHY, "no condition of its node matches a repair policy")
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
    said = (
        f"{evidence.condition} {evidence.status} since {instant(evidence.since)}, tolerated {span(evidence.toleration)}"
    )
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
        text = f"{said}, past it since {instant(evidence.due)}; {figures}: forceful, no budget, PDB or drain"
        return disrupted(NODE_REPAIR, UNHEALTHY, text, details)
    if not node.state.initialized:
        return not_disrupted(NODE_REPAIR, UNHEALTHY, m.NOT_INITIALIZED, "not initialized yet", True, details)
    if node.state.deleting or name in taken:
        return not_disrupted(
            NODE_REPAIR, UNHEALTHY, m.DELETING, "already going: another command takes it", True, details
        )
    if (name, pool) in held:
        return not_disrupted(
            NODE_REPAIR, UNHEALTHY, REPAIR_BLOCKED, f"{REPAIR_BLOCKED_MESSAGE}: {said}; {figures}", True, details
        )
    text = f"{said}: repaired from {instant(evidence.due)} if it lasts; {figures}"
    return not_disrupted(NODE_REPAIR, UNHEALTHY, m.WITHIN_TOLERATION, text, True, details)


def over_limit(asked: Asked) -> m.Verdict:
    rules, pool = asked.rules, asked.node.state.nodepool
    taken = any(f.command.reason == OVER_LIMIT and asked.name in f.command.candidates for f in asked.forceful)
    if taken:
        return disrupted(
            OVERLIMIT,
            OVER_LIMIT,
            f"nodepool {pool} is over limits.nodes and this claim goes first: forceful, no budget applies",
        )
    if rules is None or rules.node_limit.limit is None:
        return not_disrupted(OVERLIMIT, OVER_LIMIT, m.NO_NODE_LIMIT, f"nodepool {pool} has no limits.nodes")
    limit = rules.node_limit
    figures = f"{limit.nodes} node(s), limits.nodes {limit.limit}"
    if limit.excess == 0:
        return not_disrupted(
            OVERLIMIT, OVER_LIMIT, m.WITHIN_LIMIT, f"nodepool {pool} is within its node limit: {figures}"
        )
    if rules.busy:
        return not_disrupted(
            OVERLIMIT, OVER_LIMIT, m.BUSY, f"{figures}; a graceful command of the pool is under way", True
        )
    return not_disrupted(
        OVERLIMIT, OVER_LIMIT, m.NOT_CHOSEN, f"{figures}; the excess goes in the over-limit order", True
    )
