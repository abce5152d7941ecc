"""Per-NodePool counters, and the rules every counted event must satisfy.

One pure fold serves both sides: the event store runs it inside the transaction that appends an
event (strict: a broken rule raises and nothing is written), and `nodewright audit` runs it over
the whole log (reporting: a broken rule is listed and the fold goes on, since the log says it
happened). So the live table and a replay agree by construction, and a planted event is found.

Counted, per pool: `nodes` (claims created and not ended, launched or in flight, one each),
`in_flight` (not launched yet), `initialized` (the nodes budgets count), `resources` (reserved
capacity: the largest among a claim's instance types until it launches, then the launched
type's), and the claims being disrupted, with their reason and decision. An initialized claim
whose node is NotReady counts there too, with reason `NotReady`, as upstream's budgets count it.

Payloads are read as plain dicts, not contracts: replaying a million events must take seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared.api.nodepool import NODES_RESOURCE, DisruptionReason
from shared.api.quantity import format_quantity
from shared.api.validation import validate_nodepool
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.evolution import EVOLVE as _EVOLVE
from shared.policy.evolution import own_replacements
from shared.policy.forceful import flag_violation
from shared.policy.gates import BlockCause, check_disruption
from shared.policy.limits import NodeLimit, exceeded_limits
from shared.policy.pool_state import (  # re-exported: the counted state is asked for here
    ENDED,
    IN_FLIGHT,
    LAUNCHED,
    NOT_READY,
    ClaimLookup,
    ClaimState,
    PoolCounters,
)
from shared.policy.resources import format_resources, largest_capacity, resources_of
from shared.policy.violations import (
    BudgetExceeded,
    InvalidTransition,
    LimitExceeded,
    NodeLimitExceeded,
    ReservationError,
    Rule,
    Violation,
)

__all__ = [
    "CLAIM_EVENTS",
    "COUNTED_EVENTS",
    "ENDED",
    "ERRORS",
    "IN_FLIGHT",
    "LAUNCHED",
    "NOT_READY",
    "STEPS",
    "TIMED_EVENTS",
    "ClaimLookup",
    "ClaimState",
    "Outcome",
    "PoolCounters",
    "check",
    "counted_pool",
    "evolve",
    "fold_claim",
    "is_forceful",
    "own_replacements",
    "raise_for",
]

ERRORS: dict[str, type[ReservationError]] = {
    Rule.LIMITS: LimitExceeded,
    Rule.CAPACITY: LimitExceeded,
    Rule.BUDGET: BudgetExceeded,
    Rule.NODE_HARD_LIMIT: NodeLimitExceeded,
    Rule.NODEPOOL: InvalidTransition,
    Rule.LIFECYCLE: InvalidTransition,
    Rule.PAYLOAD: InvalidTransition,
    Rule.FORCEFUL: InvalidTransition,
}

Check = Callable[[PoolCounters, ClaimLookup, dict[str, Any], datetime, bool], "Outcome"]


@dataclass(slots=True)
class Outcome:
    """What checking one event found: a violation, or the figures to record with it. `more`: the
    further violations an audit's re-checks found in the same event (`shared.policy.audit`)."""

    violation: Violation | None = None
    record: dict[str, Any] | None = None
    more: tuple[Violation, ...] = ()


OK = Outcome()


def counted_pool(event_type: str, data: Mapping[str, Any]) -> str | None:
    """The pool whose counters this event changes, or None when it changes none."""
    if event_type in _EVOLVE:
        pool = data.get("nodepool")
        return pool if isinstance(pool, str) else None
    return None


def check(
    pool: PoolCounters,
    claims: ClaimLookup,
    event_type: str,
    data: dict[str, Any],
    occurred_at: datetime,
    record: bool = True,
) -> Outcome:
    """Whether the event may be appended now. With `record`, also the figures the decision was
    taken on, to store with it; a replay asks for them only where it explains."""
    rule = _CHECK.get(event_type)
    return OK if rule is None else rule(pool, claims, data, occurred_at, record)


def evolve(pool: PoolCounters, claims: ClaimLookup, event_type: str, data: dict[str, Any], position: int) -> None:
    """Apply a counted event (already checked, or recorded anyway) to the pool and its claims."""
    step = _EVOLVE.get(event_type)
    if step is not None:
        step(pool, claims, data)
        pool.version += 1
        pool.last_position = position


def is_forceful(decision: Mapping[str, Any]) -> bool:
    """A disruption that budgets do not gate (expiration, removal above a lowered node limit): by
    its reason alone, whatever its `forceful` flag says (`shared.policy.forceful`)."""
    return decision["reason"] in FORCEFUL_REASONS


def raise_for(outcome: Outcome, nodepool: str) -> None:
    if outcome.violation is not None:
        raise ERRORS[outcome.violation.rule](outcome.violation, nodepool)


# --- checks ----------------------------------------------------------------------------------------


def _violation(rule: str, detail: str, **numbers: Any) -> Outcome:
    return Outcome(Violation(rule, detail, numbers))


def _check_applied(
    pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: datetime, record: bool
) -> Outcome:
    result = validate_nodepool(data["nodepool_object"])
    if result.errors:
        errors = "; ".join(f"{e.path}: {e.message}" for e in result.errors)
        return _violation(Rule.NODEPOOL, f"nodepool {pool.nodepool} is not valid: {errors}")
    if result.name != pool.nodepool:
        return _violation(Rule.NODEPOOL, f"the object applied for nodepool {pool.nodepool} is named {result.name!r}")
    return OK


def _check_created(
    pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: datetime, record: bool
) -> Outcome:
    name = data["nodeclaim"]
    if name in claims:
        return _violation(Rule.LIFECYCLE, f"nodeclaim {name} was already created")
    policy = pool.policy()
    if policy is None:
        return _violation(Rule.NODEPOOL, f"nodepool {pool.nodepool} is not applied; no NodeClaim may be created")
    reserved = largest_capacity(data["instance_types"])
    limits = policy.limits
    decision = data.get("replacement_for")
    if decision is not None and data.get("replacement_from") not in (None, pool.nodepool):
        decision = None  # another pool's replacement: nothing of its candidates is here to count it against
    if decision is None:
        if not record:  # the common case, without building usage maps: is any limit crossed?
            resources = pool.resources
            for res, limit in limits.items():
                if res == NODES_RESOURCE:
                    if pool.nodes + 1 > limit:
                        break
                elif resources.get(res, _ZERO) + reserved.get(res, _ZERO) > limit:
                    break
            else:
                return OK
        usage = pool.usage()
    else:
        if name not in pool.replacing.get(decision, ()):
            return _violation(
                Rule.LIFECYCLE,
                f"nodeclaim {name} says it replaces for {decision}, but no live decision of nodepool "
                f"{pool.nodepool} plans it as a replacement",
            )
        # Upstream leaves candidates' capacity out of a replacement's simulation; the node count
        # keeps them in `Hard` mode (`nodeLimitMode`), and `Soft` mode lets replacements pass it.
        usage = pool.usage()
        for claim, (_, decided_by) in pool.disrupting.items():
            if decided_by == decision and claim in claims:
                for res, value in claims[claim].resources.items():
                    usage[res] = usage.get(res, _ZERO) - value
        if policy.soft:
            limits = {res: limit for res, limit in limits.items() if res != NODES_RESOURCE}
    adding = {**reserved, NODES_RESOURCE: _ONE}
    over = exceeded_limits(limits, usage, adding)
    if over:
        parts = ", ".join(
            f"{res} {format_quantity(after)} > limit {format_quantity(limit)}" for res, (after, limit) in over.items()
        )
        return _violation(
            Rule.LIMITS,
            f"nodepool {pool.nodepool}: creating {name} would exceed its limits: {parts}",
            exceeded={res: [str(after), str(limit)] for res, (after, limit) in over.items()},
            usage=format_resources(usage),
            limits=format_resources(limits),
        )
    if not record:
        return OK
    headroom = {res: limit - usage.get(res, _ZERO) for res, limit in limits.items()}
    return Outcome(
        record={
            "limit_check": {
                "usage": format_resources({res: usage.get(res, _ZERO) for res in limits}),
                "limits": format_resources(limits),
                "headroom": format_resources(headroom),
            }
        }
    )


_ZERO = Decimal(0)
_ONE = Decimal(1)


def _check_launched(
    pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: datetime, record: bool
) -> Outcome:
    claim = claims.get(data["nodeclaim"])
    bad = _not_in_flight(claim, data)
    if bad is not None:
        return bad
    assert claim is not None
    capacity = resources_of(data["capacity"])
    if capacity == claim.resources:  # launched as the option it reserved for: nothing can be larger
        return OK
    policy = pool.policy()
    limited = policy.limits if policy is not None else {}
    larger = {
        res: [str(value), str(claim.resources.get(res, Decimal(0)))]
        for res, value in capacity.items()
        if value > claim.resources.get(res, Decimal(0)) and res in limited
    }
    if larger:
        return _violation(
            Rule.CAPACITY,
            f"nodeclaim {data['nodeclaim']} launched as {data['instance_type']}, larger than it reserved: "
            + ", ".join(f"{res} {got} > {had}" for res, (got, had) in larger.items()),
            larger=larger,
        )
    return OK


def _not_in_flight(claim: ClaimState | None, data: dict[str, Any]) -> Outcome | None:
    name = data["nodeclaim"]
    if claim is None:
        return _violation(Rule.LIFECYCLE, f"nodeclaim {name} was never created")
    if claim.nodepool != data["nodepool"]:
        return _violation(Rule.LIFECYCLE, f"nodeclaim {name} belongs to nodepool {claim.nodepool}")
    if claim.phase != IN_FLIGHT:
        return _violation(Rule.LIFECYCLE, f"nodeclaim {name} is {claim.phase}, not in flight")
    return None


def _check_known(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: datetime, record: bool) -> Outcome:
    claim = claims.get(data["nodeclaim"])
    if claim is None:
        return _violation(Rule.LIFECYCLE, f"nodeclaim {data['nodeclaim']} was never created")
    if claim.nodepool != data["nodepool"]:
        return _violation(Rule.LIFECYCLE, f"nodeclaim {data['nodeclaim']} belongs to nodepool {claim.nodepool}")
    return OK


def _check_decided(
    pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: datetime, record: bool
) -> Outcome:
    policy = pool.policy()
    if policy is None:
        return _violation(Rule.NODEPOOL, f"nodepool {pool.nodepool} is not applied; nothing may be disrupted")
    for name in data["candidates"]:
        claim = claims.get(name)
        if claim is None or claim.phase == ENDED or claim.nodepool != pool.nodepool:
            return _violation(Rule.LIFECYCLE, f"candidate {name} is not a live NodeClaim of nodepool {pool.nodepool}")
        entry = pool.disrupting.get(name)
        if entry is not None and entry[0] != NOT_READY:
            return _violation(Rule.LIFECYCLE, f"candidate {name} is already being disrupted")
    reason = data["reason"]
    candidates = len(data["candidates"])
    replacements = len(own_replacements(data, pool.nodepool))
    forceful = is_forceful(data)
    node_limit = NodeLimit.of(policy.nodepool, pool.nodes)
    figures: dict[str, Any] = {
        "nodes": pool.initialized,
        "disrupting": len(pool.disrupting),
        "allowed": None,
        "remaining": None,
        "node_limit": node_limit.limit,
        "pool_nodes": pool.nodes,
        "active_budgets": [],
    }
    if forceful:
        return Outcome(record={"budget_check": figures})
    status = policy.budgets.status(at, pool.initialized, len(pool.disrupting))
    budget_reason = DisruptionReason(reason)
    t = at.timestamp()
    figures.update(
        allowed=status.allowed(budget_reason),
        remaining=status.remaining(budget_reason),
        active_budgets=[b.index for b in policy.budgets.budgets if b.schedule is None or b.schedule.is_active(t)],
    )
    gate = check_disruption(
        budget_reason, status, node_limit, candidates=candidates, replacements=replacements, forceful=False
    )
    if not gate.allowed:
        rule = Rule.BUDGET if gate.cause == BlockCause.BUDGET else Rule.NODE_HARD_LIMIT
        return _violation(
            rule,
            f"nodepool {pool.nodepool}: {gate.message}: {candidates} candidate(s), {replacements} replacement(s), "
            f"remaining {figures['remaining']}, nodes {pool.nodes}/{node_limit.limit}",
            candidates=candidates,
            replacements=replacements,
            **figures,
        )
    flagged = flag_violation(data)
    if flagged is not None:
        return Outcome(flagged)
    return Outcome(record={"budget_check": figures})


_CHECK: dict[str, Check] = {
    "NodePoolApplied": _check_applied,
    "NodeClaimCreated": _check_created,
    "NodeClaimLaunched": _check_launched,
    "NodeClaimLaunchFailed": lambda pool, claims, data, at, record: (
        _not_in_flight(claims.get(data["nodeclaim"]), data) or OK
    ),
    "NodeClaimRegistered": _check_known,
    "NodeClaimInitialized": _check_known,
    "NodeClaimNotReady": _check_known,
    "NodeClaimReady": _check_known,
    "NodeClaimDeletionRequested": _check_known,
    "NodeClaimDraining": _check_known,
    "NodeClaimTerminated": _check_known,
    "DisruptionDecided": _check_decided,
}


CLAIM_EVENTS = frozenset(t for t in _EVOLVE if t.startswith("NodeClaim"))
COUNTED_EVENTS = frozenset(_EVOLVE)
STEPS: dict[str, tuple[Check | None, Callable[[PoolCounters, ClaimLookup, dict[str, Any]], None]]] = {
    event_type: (_CHECK.get(event_type), step) for event_type, step in _EVOLVE.items()
}
"""Per counted event type, its check (None: it has none) and its step, for a replay that runs
both for every event (`shared.policy.audit`): one lookup instead of two. Like `evolve`, a caller
then moves the pool's version and last position on."""
TIMED_EVENTS = frozenset({"DisruptionDecided", "NodeClaimCreated"})
"""The events whose checks read `occurred_at`: a decision's clock (budgets are active at an
instant) and a claim's creation (an `Expired` decision is re-checked against its age,
`shared.policy.forceful`); the other checks ignore it, so a replay need not decode it for them."""


def fold_claim(
    events: Iterable[tuple[str, dict[str, Any]]], name: str | None = None, state: ClaimState | None = None
) -> ClaimState | None:
    """A claim's state from its own stream's (type, data) pairs, without touching any pool; or,
    given the `state` the claim `name` had, that state moved on by the events that followed."""
    claims: dict[str, ClaimState] = {name: state} if name is not None and state is not None else {}
    scratch = PoolCounters("")
    for event_type, data in events:
        step = _EVOLVE.get(event_type)
        if step is None or event_type not in CLAIM_EVENTS:
            continue
        name = data["nodeclaim"]
        scratch.nodepool = data["nodepool"]
        step(scratch, claims, data)
    return claims.get(name) if name else None
