"""A NodePool's `status` as Karpenter's NodePool controllers keep it: the conditions
`ValidationSucceeded`, `NodeClassReady` and `Ready` (the first two together), `nodes` and
`resources` (what its NodeClaims hold, launched or running, as its counter controller sums it).

Pure: the watcher writes what these return through the status subresource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared.api.quantity import format_quantity
from shared.policy.pool_state import PoolCounters

MESSAGE_BYTES = 32768
"""The API's limit on a condition's message."""


def _condition(kind: str, ok: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:MESSAGE_BYTES],
        "lastTransitionTime": now.isoformat(),
    }


def conditions(
    errors: Sequence[Mapping[str, str]] | None, now: datetime, previous: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """After a validation: what failed (field path and rule) or that it passed. A condition whose
    status is unchanged keeps its transition time (`previous`: the pool's conditions as read).
    The sim's NodeClass is always there and ready (a real provider's NodeClass comes with it)."""
    valid = not errors
    message = "; ".join(f"{e['path']}: {e['message']}" for e in errors or [])
    validation = _condition(
        "ValidationSucceeded", valid, "ValidationSucceeded" if valid else "ValidationFailed", message, now
    )
    nodeclass = _condition("NodeClassReady", True, "NodeClassReady", "", now)
    ready = _condition(
        "Ready",
        valid,
        "Ready" if valid else "UnhealthyDependents",
        "" if valid else "ValidationSucceeded=False",
        now,
    )
    since = {c.get("type"): c for c in previous}
    out = [validation, nodeclass, ready]
    for condition in out:
        old = since.get(condition["type"])
        if old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
            condition["lastTransitionTime"] = old["lastTransitionTime"]
    return out


def counted(counters: PoolCounters) -> dict[str, Any]:
    """`nodes` and `resources` (the node count among them, as upstream's counter reports it)."""
    return {"nodes": counters.nodes, "resources": _quantities(counters.usage())}


def _quantities(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in ("memory", "ephemeral-storage")) for k, v in sorted(values.items())}


def same_conditions(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> bool:
    """Whether writing `new` would change anything but the transition times."""

    def key(items: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in items)

    return key(old) == key(new)
