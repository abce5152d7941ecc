"""How each counted event moves a pool's counters and its claims (`shared.policy.counters` checks
an event first, then applies its step here). A step trusts that its event was checked, or was
recorded anyway (a replay of a log that says it happened), and never raises."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from shared.policy.pool_state import ENDED, IN_FLIGHT, LAUNCHED, NOT_READY, ClaimLookup, ClaimState, PoolCounters
from shared.policy.resources import largest_capacity, resources_of


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
    """A NotReady initialized claim that nothing else disrupts consumes the budget (docs/budgets.md,
    B21; an uninitialized one does not, B23)."""
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


def own_replacements(decision: Mapping[str, Any], nodepool: str) -> list[str]:
    """A decision's replacements launched in `nodepool` (its own pool unless it names another):
    those its pool plans (`replacing`) and its node hard limit counts. One in another pool is
    reserved there as a launch is, when it is created."""
    elsewhere = decision.get("replacement_nodepools") or {}
    return [name for name in decision.get("replacements") or () if elsewhere.get(name, nodepool) == nodepool]


def _decided(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    planned = own_replacements(data, pool.nodepool)
    if planned:
        pool.replacing[data["decision_id"]] = planned
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
    """A claim being deleted consumes its pool's budget until it ends, whoever asked (upstream's
    `BuildDisruptionBudgetMapping`: MarkedForDeletion and a deletion timestamp count as
    disrupting; docs/budgets.md, B20)."""
    name = data["nodeclaim"]
    claim = claims.get(name)
    entry = pool.disrupting.get(name)
    if claim is not None and claim.initialized and claim.phase != ENDED and (entry is None or entry[0] == NOT_READY):
        pool.disrupting[name] = [data.get("reason") or "Manual", data.get("decision_id") or ""]


def _no_change(pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any]) -> None:
    return None


EVOLVE: dict[str, Callable[[PoolCounters, ClaimLookup, dict[str, Any]], None]] = {
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
