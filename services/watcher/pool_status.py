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


def status_condition(kind: str, ok: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """A status condition as the API holds it, its message cut to the API's limit."""
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:MESSAGE_BYTES],
        "lastTransitionTime": now.isoformat(),
    }


NOT_FOUND = (False, "NodeClassNotFound", "NodeClass not found on cluster")
UNKNOWN = (False, "NodeClassReadinessUnknown", "Node Class Readiness Unknown")
SIM_CLASS = (True, "NodeClassReady", "")
"""The sim's NodeClass is always there and ready."""


def nodeclass_state(
    document: Mapping[str, Any] | None, cloud: bool, readiness: Mapping[str, tuple[bool, str, str]], present: set[str]
) -> tuple[bool, str, str]:
    """NodeClassReady as upstream's nodepool readiness controller sets it: the class's Ready
    (reason and message copied) when the pool's nodeClassRef is an EC2NodeClass and the cloud is
    AWS (`cloud`); not found, or readiness unknown (not resolved yet), otherwise False."""
    ref = ((((document or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    if not cloud or ref.get("kind") != "EC2NodeClass":
        return SIM_CLASS
    name = ref.get("name") or ""
    if name not in present:
        return NOT_FOUND
    return readiness.get(name, UNKNOWN)


def conditions(
    errors: Sequence[Mapping[str, str]] | None,
    now: datetime,
    previous: Sequence[Mapping[str, Any]] = (),
    nodeclass: tuple[bool, str, str] = SIM_CLASS,
) -> list[dict[str, Any]]:
    """After a validation: what failed (field path and rule) or that it passed, and whether the
    pool's class is ready (`nodeclass_state`). A condition whose status is unchanged keeps its
    transition time (`previous`: the pool's conditions as read)."""
    valid = not errors
    message = "; ".join(f"{e['path']}: {e['message']}" for e in errors or [])
    validation = status_condition(
        "ValidationSucceeded", valid, "ValidationSucceeded" if valid else "ValidationFailed", message, now
    )
    class_ready, class_reason, class_message = nodeclass
    nodeclass_condition = status_condition("NodeClassReady", class_ready, class_reason, class_message, now)
    unhealthy = [kind for kind, ok in (("ValidationSucceeded", valid), ("NodeClassReady", class_ready)) if not ok]
    ready = status_condition(
        "Ready",
        not unhealthy,
        "UnhealthyDependents" if unhealthy else "Ready",
        ", ".join(f"{kind}=False" for kind in unhealthy),
        now,
    )
    since = {c.get("type"): c for c in previous}
    out = [validation, nodeclass_condition, ready]
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
