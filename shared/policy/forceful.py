"""Forceful disruption decisions, re-checked by the audit.

Budgets do not gate `Expired` and `OverLimit`, so such a decision must stand on its own facts at
the moment it was taken, or it could disrupt anything at any time unseen:
- `Expired`: every candidate is at least its expireAfter old (`shared.disruption.expiration`: a
  claim goes at creation plus the expireAfter its pool's template gave it then; Never never goes).
- `OverLimit`: the pool has more claims not being deleted than `limits.nodes`, and the decision
  removes no more than that excess (`shared.policy.overlimit.overlimit_victims` leaves exactly the
  limit).
- `Overprovisioned` (a static pool's scale-down): the same against the pool's `replicas`, which
  `shared.disruption.static.scale_down` leaves exactly.
- `Unhealthy` (node repair): each candidate's node was NotReady at the decision, since no later
  than its evidence says, for at least the toleration the evidence names, and no more than 20% of
  the pool's nodes were unhealthy then (`shared.policy.unhealthy`).
- The payload's `forceful` flag is honoured only for those reasons: a graceful reason marked
  forceful is named, and its budget is checked all the same (`counters.is_forceful`).

The store checks the flag (`counters`); the other two need a claim's creation time and the
claims already being deleted, which only a replay of the log has, so the audit checks them, once
per decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.api.core import NODE_READY
from shared.api.duration import format_duration
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.pool_state import ENDED, NOT_READY, ClaimLookup, PoolCounters
from shared.policy.unhealthy import unhealthy_threshold
from shared.policy.violations import Rule, Violation

EXPIRED = "Expired"
OVER_LIMIT = "OverLimit"
OVERPROVISIONED = "Overprovisioned"
UNHEALTHY = "Unhealthy"


Birth = tuple[datetime | None, dict[str, Any] | None]
"""When a claim was created, and the spec of its pool then (None: not applied), whose template gave
it its expireAfter. A replay notes one per claim, so it is a plain tuple: the expireAfter is read
from the spec only when a decision needs it."""


def expire_after(nodepool: str, spec: dict[str, Any] | None) -> timedelta | None:
    """The expireAfter a pool's spec gives a claim (None: Never, or no valid spec: an invalid one's
    NodePoolApplied was already reported)."""
    if spec is None:
        return None
    try:
        policy = PoolCounters(nodepool, spec).policy()
    except ValueError:
        return None
    return policy.expire_after if policy is not None else None


def flag_violation(data: Mapping[str, Any]) -> Violation | None:
    """A graceful reason marked forceful: the flag would let it pass the budgets."""
    reason = data["reason"]
    if not data.get("forceful") or reason in FORCEFUL_REASONS:
        return None
    return Violation(
        Rule.FORCEFUL,
        f"decision {data['decision_id']} is marked forceful, but {reason} is not a forceful reason "
        f"(only {', '.join(sorted(FORCEFUL_REASONS))} pass budgets): its budget applies",
        {"reason": reason},
    )


@dataclass(frozen=True, slots=True)
class Recheck:
    """What re-checking one forceful decision found, and the figures it was judged on."""

    violation: Violation | None = None
    facts: dict[str, Any] | None = None


NOTHING = Recheck()


def recheck(
    pool: PoolCounters,
    claims: ClaimLookup,
    data: Mapping[str, Any],
    at: datetime | None,
    births: Mapping[str, Birth],
    deleting: set[str] | None,
    sick: Mapping[str, Mapping[str, str]] | None = None,
) -> Recheck:
    """A forceful decision against the log's state just before it (`deleting`: this pool's claims
    whose deletion was requested, pruned here of those that ended; `sick`: per claim, its node's
    conditions not healthy now, Ready's or an agent's, since when)."""
    reason = data["reason"]
    if reason == EXPIRED:
        return _expired(data, at, births)
    if reason in (OVER_LIMIT, OVERPROVISIONED):
        return _over_limit(pool, claims, data, deleting)
    if reason == UNHEALTHY:
        return _unhealthy(pool, claims, data, at, sick or {})
    return NOTHING


def _unhealthy(
    pool: PoolCounters,
    claims: ClaimLookup,
    data: Mapping[str, Any],
    at: datetime | None,
    sick: Mapping[str, Mapping[str, str]],
) -> Recheck:
    evidence = data.get("unhealthy")
    name = pool.nodepool
    unhealthy = sum(
        1
        for claim, c in claims.items()
        if c.nodepool == name
        and c.phase != ENDED
        and c.initialized
        and (not c.ready or any(kind != NODE_READY for kind in sick.get(claim, ())))
    )
    allowed = unhealthy_threshold(pool.initialized)
    facts: dict[str, Any] = {"nodes": pool.initialized, "unhealthy": unhealthy, "allowed": allowed}
    wrong: list[str] = []
    if not evidence:
        wrong.append("it records no evidence (condition, since, toleration)")
    else:
        kind, status = evidence["condition"], evidence["status"]
        since = datetime.fromisoformat(evidence["since"])
        due = since + timedelta(seconds=evidence["toleration_seconds"])
        facts |= {"condition": f"{kind}={status}", "since": since.isoformat()}
        if at is not None and at < due:
            wrong.append(f"its {kind}={status} since {since.isoformat()} is tolerated until {due.isoformat()}")
        for claim in data["candidates"]:
            state = claims.get(claim)
            if state is None or state.phase == ENDED:
                continue  # the lifecycle rule names it
            recorded = sick.get(claim, {}).get(kind)
            if kind == NODE_READY and state.ready:
                wrong.append(f"{claim} was Ready")
            elif kind == NODE_READY and recorded is not None and datetime.fromisoformat(recorded) > since:
                wrong.append(f"{claim} was NotReady only since {recorded}")
            elif kind != NODE_READY and recorded is None:
                wrong.append(f"{claim} had no {kind} other than True recorded")
            elif kind != NODE_READY and datetime.fromisoformat(recorded) > since:
                wrong.append(f"{claim} was {kind}={status} only since {recorded}")
    if unhealthy > allowed:
        wrong.append(
            f"{unhealthy} of its {pool.initialized} node(s) were unhealthy, more than the {allowed} "
            "(20%) that allow repair"
        )
    if not wrong:
        return Recheck(None, {"unhealthy_check": facts})
    detail = (
        f"decision {data['decision_id']} repairs nodepool {name}'s {', '.join(data['candidates'])}, but "
        + "; ".join(wrong)
    )
    return Recheck(Violation(Rule.UNHEALTHY, detail, {"unhealthy_check": facts}), {"unhealthy_check": facts})


def _expired(data: Mapping[str, Any], at: datetime | None, births: Mapping[str, Birth]) -> Recheck:
    if at is None:
        return NOTHING
    facts: dict[str, Any] = {}
    young: list[str] = []
    for name in data["candidates"]:
        created_at, spec = births.get(name, (None, None))
        if created_at is None:
            continue  # never created: the lifecycle rule names it
        age = at - created_at
        lifetime = expire_after(data["nodepool"], spec)
        shown = "Never" if lifetime is None else format_duration(lifetime)
        facts[name] = {"age": format_duration(age), "expire_after": shown}
        if lifetime is None:
            young.append(f"{name} never expires (expireAfter Never)")
        elif age < lifetime:
            young.append(f"{name} is {format_duration(age)} old, its expireAfter {shown}")
    if not young:
        return Recheck(None, {"expiry_check": facts})
    violation = Violation(
        Rule.EXPIRED,
        f"decision {data['decision_id']} in nodepool {data['nodepool']} expires "
        f"{len(young)} claim(s) not expired then: {'; '.join(young)}",
        {"expiry_check": facts},
    )
    return Recheck(violation, {"expiry_check": facts})


def _over_limit(pool: PoolCounters, claims: ClaimLookup, data: Mapping[str, Any], deleting: set[str] | None) -> Recheck:
    """OverLimit against `limits.nodes`, Overprovisioned against `replicas`: the same count."""
    policy = pool.policy()
    if policy is None:
        return NOTHING  # not applied: the nodepool rule names it
    reason = data["reason"]
    spec = policy.nodepool.spec
    limit, bound, what = (
        (spec.node_limit, "limits.nodes", "its limit")
        if reason == OVER_LIMIT
        else (spec.replicas, "replicas", "its replicas")
    )
    going = _going(pool, claims, deleting)
    active = pool.nodes - len(going)
    candidates: Sequence[str] = data["candidates"]
    excess = active - max(limit, 0) if limit is not None else 0
    facts = {
        "nodes": pool.nodes,
        "deleting": len(going),
        "active": active,
        "limit": limit,
        "excess": excess if limit is not None else None,
        "candidates": len(candidates),
        **({} if reason == OVER_LIMIT else {"bound": bound}),
    }
    head = f"decision {data['decision_id']} removes {len(candidates)} claim(s) of nodepool {pool.nodepool}"
    if limit is None:
        detail = f"{head} for {reason}, but the nodepool has no {bound}"
    elif excess <= 0:
        detail = (
            f"{head} for {reason}, but it is not over {what}: {active} node(s) not being deleted "
            f"({pool.nodes} in all), {bound} {limit}"
        )
    elif len(candidates) > excess:
        detail = (
            f"{head} for {reason}, {len(candidates) - excess} more than the {excess} above {what}: "
            f"{active} node(s) not being deleted ({pool.nodes} in all), {bound} {limit}"
        )
    else:
        return Recheck(None, {"over_limit_check": facts})
    return Recheck(Violation(Rule.OVER_LIMIT, detail, {"over_limit_check": facts}), {"over_limit_check": facts})


def _going(pool: PoolCounters, claims: ClaimLookup, deleting: set[str] | None) -> set[str]:
    """The pool's live claims already on their way out: marked by a decision or deleted (the
    `deleting` claims the over-limit method sets aside)."""
    name = pool.nodepool

    def live(claim: str) -> bool:
        state = claims.get(claim)
        return state is not None and state.phase != ENDED and state.nodepool == name

    going = {claim for claim, (reason, _) in pool.disrupting.items() if reason != NOT_READY and live(claim)}
    if deleting:
        deleting -= {claim for claim in deleting if not live(claim)}  # ended: never again going
        going |= deleting
    return going
