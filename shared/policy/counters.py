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

import functools
import json
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared.api.nodepool import NODES_RESOURCE, DisruptionReason, NodePool
from shared.api.quantity import format_quantity
from shared.api.validation import validate_nodepool
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.budgets import DisruptionBudgets
from shared.policy.gates import BlockCause, check_disruption
from shared.policy.limits import NodeLimit, exceeded_limits
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

IN_FLIGHT = "in_flight"
LAUNCHED = "launched"
ENDED = "ended"
NOT_READY = "NotReady"
"""The `disrupting` reason of a claim that only consumes budget because its node is NotReady."""


ERRORS: dict[str, type[ReservationError]] = {
    Rule.LIMITS: LimitExceeded,
    Rule.CAPACITY: LimitExceeded,
    Rule.BUDGET: BudgetExceeded,
    Rule.NODE_HARD_LIMIT: NodeLimitExceeded,
    Rule.NODEPOOL: InvalidTransition,
    Rule.LIFECYCLE: InvalidTransition,
    Rule.PAYLOAD: InvalidTransition,
}


@dataclass(slots=True)
class ClaimState:
    """One NodeClaim as the counters see it."""

    nodepool: str
    resources: Mapping[str, Decimal]  # replaced on change, never changed in place (may be shared)
    phase: str = IN_FLIGHT
    initialized: bool = False
    replacement_for: str | None = None
    ready: bool = True

    def copy(self) -> ClaimState:
        """A twin to evolve separately (`resources` is replaced on change, never mutated)."""
        return ClaimState(self.nodepool, self.resources, self.phase, self.initialized, self.replacement_for, self.ready)


@dataclass(slots=True)
class PoolCounters:
    """The `nodepool_counters` row of one pool."""

    nodepool: str
    spec: dict[str, Any] | None = None
    nodes: int = 0
    in_flight: int = 0
    initialized: int = 0
    resources: dict[str, Decimal] = field(default_factory=dict)
    disrupting: dict[str, list[str]] = field(default_factory=dict)  # claim -> [reason, decision id]
    replacing: dict[str, list[str]] = field(default_factory=dict)  # decision id -> replacements not created yet
    version: int = 0
    last_position: int = 0
    _policy: _PoolPolicy | None = None
    _policy_for: dict[str, Any] | None = None

    def copy(self) -> PoolCounters:
        """A twin to evolve separately: its maps are its own (the spec is shared, never changed)."""
        return PoolCounters(
            self.nodepool,
            self.spec,
            self.nodes,
            self.in_flight,
            self.initialized,
            dict(self.resources),
            dict(self.disrupting),
            {k: list(v) for k, v in self.replacing.items()},
            self.version,
            self.last_position,
            self._policy,
            self._policy_for,
        )

    def usage(self) -> dict[str, Decimal]:
        return {**self.resources, NODES_RESOURCE: Decimal(self.nodes)}

    def disrupting_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for reason, _ in self.disrupting.values():
            out[reason] = out.get(reason, 0) + 1
        return dict(sorted(out.items()))

    def policy(self) -> _PoolPolicy | None:
        if self.spec is None:
            return None
        if self._policy is None or self._policy_for is not self.spec:
            known = _POLICY_BY_OBJECT.get(id(self.spec))
            if known is None or known[0] is not self.spec:
                if len(_POLICY_BY_OBJECT) >= 1024:
                    _POLICY_BY_OBJECT.clear()
                policy = _policy_of(json.dumps(self.spec, sort_keys=True))
                known = _POLICY_BY_OBJECT[id(self.spec)] = (self.spec, policy)
            self._policy, self._policy_for = known[1], self.spec
        return self._policy

    def comparable(self) -> dict[str, Any]:
        """The counted state, for comparing a replay with the live table."""
        return {
            "nodepool": self.nodepool,
            "spec": self.spec,
            "nodes": self.nodes,
            "in_flight": self.in_flight,
            "initialized": self.initialized,
            "resources": format_resources({k: v for k, v in self.resources.items() if v}),
            "disrupting": dict(sorted(self.disrupting.items())),
            "replacing": dict(sorted(self.replacing.items())),
            "version": self.version,
            "last_position": self.last_position,
        }


@dataclass(frozen=True, slots=True)
class _PoolPolicy:
    nodepool: NodePool
    limits: dict[str, Decimal]
    budgets: DisruptionBudgets
    soft: bool


_POLICY_BY_OBJECT: dict[int, tuple[dict[str, Any], _PoolPolicy]] = {}
"""Policies by spec object, for callers that hand the same spec to many PoolCounters (the store's
spec cache): no serialising at all. The entry keeps its spec alive, so an id is never reused."""


@functools.lru_cache(maxsize=1024)
def _policy_of(spec_text: str) -> _PoolPolicy:
    """The parsed NodePool, keyed by its canonical JSON: each spec is parsed once per process."""
    nodepool = NodePool.model_validate_json(spec_text)
    limits = {name: q.value for name, q in (nodepool.spec.limits or {}).items()}
    soft = nodepool.spec.disruption.node_limit_mode == "Soft"
    return _PoolPolicy(nodepool, limits, DisruptionBudgets.of(nodepool), soft)


ClaimLookup = MutableMapping[str, ClaimState]
Check = Callable[[PoolCounters, ClaimLookup, dict[str, Any], datetime, bool], "Outcome"]


@dataclass(slots=True)
class Outcome:
    """What checking one event found: a violation, or the figures to record with it."""

    violation: Violation | None = None
    record: dict[str, Any] | None = None


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
    """A disruption that budgets do not gate (expiration, removal above a lowered node limit)."""
    return decision["reason"] in FORCEFUL_REASONS or bool(decision.get("forceful"))


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
        # keeps them in `Hard` mode (seed 001), and `Soft` mode lets replacements pass it.
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
    replacements = len(data.get("replacements") or ())
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


# --- evolution ---------------------------------------------------------------------------------------


def _add(target: dict[str, Decimal], values: Mapping[str, Decimal], sign: int) -> None:
    if sign > 0:
        for name, value in values.items():
            target[name] = target[name] + value if name in target else value
    else:
        for name, value in values.items():
            target[name] = target[name] - value if name in target else -value


def _applied(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    pool.spec = data["nodepool_object"]


def _deleted(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    pool.spec = None


def _created(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    name = data["nodeclaim"]
    if name in claims:
        return
    reserved = largest_capacity(data["instance_types"])
    decision = data.get("replacement_for")
    claims[name] = ClaimState(data["nodepool"], reserved, IN_FLIGHT, False, decision)
    planned = pool.replacing.get(decision) if decision else None
    if planned is not None and name in planned:
        planned.remove(name)
        if not planned:
            del pool.replacing[decision]
    pool.nodes += 1
    pool.in_flight += 1
    _add(pool.resources, reserved, 1)


def _launched(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    claim = claims.get(data["nodeclaim"])
    if claim is None or claim.phase != IN_FLIGHT:
        return
    capacity = resources_of(data["capacity"])
    if capacity != claim.resources:
        _add(pool.resources, claim.resources, -1)
        _add(pool.resources, capacity, 1)
    claim.resources = capacity
    claim.phase = LAUNCHED
    pool.in_flight -= 1


def _initialized(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    claim = claims.get(data["nodeclaim"])
    if claim is None or claim.phase == ENDED or claim.initialized:
        return
    claim.initialized = True
    pool.initialized += 1
    _consume_if_not_ready(pool, claim, data["nodeclaim"])


def _not_ready(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    claim = claims.get(data["nodeclaim"])
    if claim is None or claim.phase == ENDED:
        return
    claim.ready = False
    _consume_if_not_ready(pool, claim, data["nodeclaim"])


def _ready(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    name = data["nodeclaim"]
    claim = claims.get(name)
    if claim is not None:
        claim.ready = True
    entry = pool.disrupting.get(name)
    if entry is not None and entry[0] == NOT_READY:
        del pool.disrupting[name]


def _consume_if_not_ready(pool: PoolCounters, claim: ClaimState | None, name: str) -> None:
    """A NotReady initialized claim that nothing else disrupts consumes the budget (reference B21;
    an uninitialized one does not, B23)."""
    if claim is not None and not claim.ready and claim.initialized and claim.phase != ENDED:
        pool.disrupting.setdefault(name, [NOT_READY, ""])


def _release(pool: PoolCounters, claims: ClaimLookup, name: str, decision: str) -> None:
    """The decision no longer disrupts `name`; a NotReady node still consumes the budget."""
    entry = pool.disrupting.get(name)
    if entry is not None and entry[1] == decision:
        del pool.disrupting[name]
        _consume_if_not_ready(pool, claims.get(name), name)


def _ended(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    name = data["nodeclaim"]
    claim = claims.get(name)
    if claim is None or claim.phase == ENDED:
        return
    _add(pool.resources, claim.resources, -1)
    pool.nodes -= 1
    if claim.phase == IN_FLIGHT:
        pool.in_flight -= 1
    if claim.initialized:
        pool.initialized -= 1
    claim.phase = ENDED
    pool.disrupting.pop(name, None)


def _decided(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    if data.get("replacements"):
        pool.replacing[data["decision_id"]] = list(data["replacements"])
    for name in data["candidates"]:
        claim = claims.get(name)
        if claim is not None and claim.phase != ENDED:
            pool.disrupting[name] = [data["reason"], data["decision_id"]]


def _cancelled(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    pool.replacing.pop(data["decision_id"], None)
    for name in data.get("candidates") or ():
        _release(pool, claims, name, data["decision_id"])


def _completed(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    """The command handed its candidates to termination: they stay disrupting until they end
    (upstream counts a deleting node against the budget)."""
    pool.replacing.pop(data["decision_id"], None)


def _validated(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    for name in data.get("dropped") or ():
        _release(pool, claims, name, data["decision_id"])


def _deletion_requested(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    """A claim being deleted consumes its pool's budget until it ends, whoever asked (reference
    §2: MarkedForDeletion and a deletion timestamp count as disrupting)."""
    name = data["nodeclaim"]
    claim = claims.get(name)
    entry = pool.disrupting.get(name)
    if claim is not None and claim.initialized and claim.phase != ENDED and (entry is None or entry[0] == NOT_READY):
        pool.disrupting[name] = [data.get("reason") or "Manual", data.get("decision_id") or ""]


def _no_change(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    return None


_EVOLVE: dict[str, Callable[[PoolCounters, ClaimLookup, dict[str, Any]], None]] = {
    "NodePoolApplied": _applied,
    "NodePoolDeleted": _deleted,
    "NodePoolRejected": _deleted,  # ValidationSucceeded false: like upstream, nothing launches or disrupts there
    "NodeClaimCreated": _created,
    "NodeClaimLaunched": _launched,
    "NodeClaimLaunchFailed": _ended,
    "NodeClaimRegistered": _no_change,
    "NodeClaimInitialized": _initialized,
    "NodeClaimNotReady": _not_ready,
    "NodeClaimReady": _ready,
    "NodeClaimDeletionRequested": _deletion_requested,
    "NodeClaimDraining": _no_change,
    "NodeClaimTerminated": _ended,
    "DisruptionDecided": _decided,
    "DisruptionValidated": _validated,
    "DisruptionCancelled": _cancelled,
    "DisruptionCompleted": _completed,
}

CLAIM_EVENTS = frozenset(t for t in _EVOLVE if t.startswith("NodeClaim"))
COUNTED_EVENTS = frozenset(_EVOLVE)
STEPS: dict[str, tuple[Check | None, Callable[[PoolCounters, ClaimLookup, dict[str, Any]], None]]] = {
    event_type: (_CHECK.get(event_type), step) for event_type, step in _EVOLVE.items()
}
"""Per counted event type, its check (None: it has none) and its step, for a replay that runs
both for every event (`shared.policy.audit`): one lookup instead of two. Like `evolve`, a caller
then moves the pool's version and last position on."""
TIMED_EVENTS = frozenset({"DisruptionDecided"})
"""The events whose rules read the decision's clock (budgets are active at an instant); the other
checks ignore `occurred_at`, so a replay need not decode it for them."""


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
