"""Each disruption method asked about one claim of a `World`, in the pass's order (the forceful
Expiration, a static pool's Overprovisioned scale-down, OverLimit and node repair, in
`shared.explain.forceful`, then the graceful Emptiness, StaticDrift, Drift and Consolidation,
here), and the answer told with its cause.

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
from typing import Any

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Blocked, Candidate
from shared.disruption.consolidatable import disabled_message
from shared.disruption.consolidation import movable
from shared.disruption.drift import Drift
from shared.disruption.emptiness import emptiness
from shared.disruption.method import EVENTUAL, GRACEFUL
from shared.disruption.passes import NODE_HARD_LIMIT, forceful, graceful, repair
from shared.disruption.pricing import NOT_CHEAPER as NOT_CHEAPER_TEXT
from shared.disruption.pricing import worst_price
from shared.disruption.simulation import simulate
from shared.disruption.singlenode import SingleNodeConsolidation
from shared.disruption.static_drift import StaticDrift
from shared.disruption.world import World, consolidatable_from
from shared.explain import model as m
from shared.explain.asked import (
    CONSOLIDATION,
    DRIFT,
    EMPTINESS,
    SHOWN_PODS,
    STATIC_DRIFT,
    Asked,
    disrupted,
    instant,
    not_disrupted,
    span,
)
from shared.explain.forceful import expired, over_limit, overprovisioned, repaired
from shared.policy.limits import blocked_by_node_limit_message


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


def empty(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.EMPTY
    if asked.static:
        return _static(asked, EMPTINESS, reason)
    found = asked.candidate(GRACEFUL)
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, EMPTINESS, reason, found)
    if not found.empty:
        return not_disrupted(EMPTINESS, reason, m.NOT_EMPTY, _pods(found))
    rules = asked.world.pools[found.nodepool]
    said = emptiness(
        [found],
        remaining=asked.remaining(reason),
        disabled=lambda _: rules.consolidate_after is None,
        consolidatable=asked.round.consolidatable,
    )
    if said.command is not None:
        return disrupted(EMPTINESS, str(reason), "empty and Consolidatable")
    if asked.name in said.unconsolidatable:
        return not_disrupted(EMPTINESS, reason, m.CONSOLIDATION_DISABLED, said.unconsolidatable[asked.name], True)
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
    return not_disrupted(method, reason, m.STATIC_POOL, text)


def static_drifted(asked: Asked) -> m.Verdict:
    """`StaticDrift` (a static pool's drifted node replaced one-for-one from its template), asked
    as the pass asks it: its `compute_commands` on this claim alone within the Drifted budget."""
    reason = DisruptionReason.DRIFTED
    node, rules = asked.node, asked.rules
    if not node.drift:
        return not_disrupted(
            STATIC_DRIFT, reason, m.NOT_DRIFTED, "not drifted: it matches its NodePool and the catalog"
        )
    details = {"drift": node.drift, "drifted_since": node.drifted_since}
    found = _drift_candidate(asked, STATIC_DRIFT, reason, details)
    if not isinstance(found, Candidate):
        return found
    outcome = StaticDrift().compute_commands(asked.round, asked.remaining(reason), [found])
    if outcome.found:
        return disrupted(
            STATIC_DRIFT,
            str(reason),
            f"drifted ({node.drift}): replaced one-for-one by a claim of nodepool "
            f"{found.nodepool}'s template, launched and initialized before it goes",
            details,
        )
    if outcome.limited:
        return not_disrupted(STATIC_DRIFT, reason, NODE_HARD_LIMIT, _limited(asked, reason), True, details)
    pool = node.state.nodepool
    live = sum(1 for n in asked.world.nodes if n.state.nodepool == pool and not n.state.deleting)
    if rules is not None and rules.replicas is not None and live > rules.replicas:
        text = (
            f"drifted ({node.drift}), but nodepool {pool} has {live} claim(s), replicas {rules.replicas}: "
            "its scale-down comes first"
        )
        return not_disrupted(STATIC_DRIFT, reason, m.OVER_REPLICAS, text, True, details)
    text = f"drifted ({node.drift}), but nodepool {pool}'s node class is not Ready: no replacement can launch"
    return not_disrupted(STATIC_DRIFT, reason, m.NODE_CLASS_NOT_READY, text, True, details)


def _drift_candidate(
    asked: Asked, method: str, reason: DisruptionReason, details: dict[str, Any]
) -> Candidate | m.Verdict:
    """The drifted claim as an eventual candidate with budget left, or the verdict of why not
    (with the drift's details), as `StaticDrift` and `Drift` both ask first."""
    found = asked.candidate(EVENTUAL)
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, method, reason, found).model_copy(update={"details": details})
    blocked = asked.no_budget(method, reason)
    if blocked is not None:
        return blocked.model_copy(update={"details": details})
    return found


def drifted(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.DRIFTED
    node = asked.node
    if not node.drift:
        return not_disrupted(DRIFT, reason, m.NOT_DRIFTED, "not drifted: it matches its NodePool and the catalog")
    if asked.static:  # `Drift.should_disrupt` leaves static pools to `StaticDrift`
        text = f"nodepool {node.state.nodepool} is static: StaticDrift replaces its drifted nodes, not Drift"
        return not_disrupted(
            DRIFT, reason, m.STATIC_POOL, text, False, {"drift": node.drift, "drifted_since": node.drifted_since}
        )
    details = {"drift": node.drift, "drifted_since": node.drifted_since}
    found = _drift_candidate(asked, DRIFT, reason, details)
    if not isinstance(found, Candidate):
        return found
    outcome = Drift().compute_commands(asked.round, asked.remaining(reason), [found])
    if outcome.found:
        command = outcome.found[0].command
        text = (
            f"drifted ({node.drift}): replaced by {command.replacements} new claim(s)" if command.replacements else ""
        )
        return disrupted(
            DRIFT, str(reason), text or f"drifted ({node.drift}): deleted, its pods fit elsewhere", details
        )
    if outcome.blocked:
        return not_disrupted(DRIFT, reason, outcome.blocked[0].cause, outcome.blocked[0].message, True, details)
    if outcome.limited:
        return not_disrupted(DRIFT, reason, NODE_HARD_LIMIT, _limited(asked, reason), True, details)
    return not_disrupted(
        DRIFT, reason, m.NO_PRICE, "drifted, but its node, instance or price is not known", True, details
    )


def consolidation(asked: Asked) -> m.Verdict:
    reason = DisruptionReason.UNDERUTILIZED
    if asked.static:
        return _static(asked, CONSOLIDATION, reason)
    found = asked.candidate(GRACEFUL)
    if not isinstance(found, Candidate):
        return _not_a_candidate(asked, CONSOLIDATION, reason, found)
    if found.empty:
        return not_disrupted(CONSOLIDATION, reason, m.EMPTY, "empty: Emptiness takes an empty node, not consolidation")
    rules = asked.world.pools[found.nodepool]
    if not movable(asked.round, found):  # the methods' own test; then which part of it failed
        if rules.consolidate_after is None:
            return not_disrupted(
                CONSOLIDATION, reason, m.CONSOLIDATION_DISABLED, disabled_message(found.nodepool), True
            )
        if not asked.round.consolidatable(found):
            return _not_yet(asked, CONSOLIDATION, reason)
        if rules.when_empty:
            text = f"nodepool {found.nodepool}'s consolidationPolicy is WhenEmpty: a node with pods stays"
            return not_disrupted(CONSOLIDATION, reason, m.WHEN_EMPTY, text, True)
        return not_disrupted(
            CONSOLIDATION, reason, m.NO_PRICE, "its instance type, zone or capacity type has no price", True
        )
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
        return disrupted(CONSOLIDATION, str(reason), text, details)
    if outcome.limited:
        return not_disrupted(CONSOLIDATION, reason, NODE_HARD_LIMIT, _limited(asked, reason), True, details)
    why = outcome.unconsolidatable.get(asked.name) or "no command"
    return not_disrupted(CONSOLIDATION, reason, _cause_of(why), _with_figures(why, details), True, details)


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
        shown = "; ".join(f"{pod}: {r}" for pod, r in list(unplaced.items())[:SHOWN_PODS])
        more = f" (and {len(unplaced) - SHOWN_PODS} more)" if len(unplaced) > SHOWN_PODS else ""
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
        return not_disrupted(method, reason, found.cause, found.message, True)
    if not asked.node.state.initialized:
        return not_disrupted(method, reason, m.NOT_INITIALIZED, "not initialized yet", True)
    return not_disrupted(
        method, reason, m.DELETING, "already going: its deletion is asked for or a command takes it", True
    )


def _not_yet(asked: Asked, method: str, reason: DisruptionReason) -> m.Verdict:
    """Not Consolidatable: when it will be, and since what."""
    node = asked.node
    at = consolidatable_from(asked.world, node)
    rules = asked.rules
    after = rules.consolidate_after if rules is not None else None
    since = (
        f"its last pod event at {instant(node.last_pod_event)}"
        if node.last_pod_event is not None
        else f"its initialization at {instant(node.initialized_at)}"
    )
    if at is None:
        return not_disrupted(method, reason, m.CONSOLIDATION_DISABLED, disabled_message(node.state.nodepool), True)
    wait = at - asked.world.now
    text = f"not consolidatable until {instant(at)} (in {span(wait)}): consolidateAfter {span(after)} after {since}"
    return not_disrupted(method, reason, m.NOT_CONSOLIDATABLE, text, True, {"consolidatable_at": at})


def _pods(found: Candidate) -> str:
    keys = [p.key for p in found.reschedulable]
    shown = ", ".join(keys[:SHOWN_PODS]) + (f" and {len(keys) - SHOWN_PODS} more" if len(keys) > SHOWN_PODS else "")
    return f"not empty: {len(keys)} pod(s) would need a place elsewhere ({shown})"


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
