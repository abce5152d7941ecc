"""Events for tests: a small vocabulary over the contracts, with sensible defaults."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.events import contracts as c
from shared.events.envelope import Metadata, NewEvent, RecordedEvent
from shared.policy.audit import LogEntry
from tests.conftest import nodepool_doc

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # a Monday


def pool_object(
    name: str,
    limits: dict[str, str] | None = None,
    budgets: list[dict] | None = None,
    mode: str | None = None,
    expire_after: str | None = None,
) -> dict[str, Any]:
    doc = nodepool_doc(**{"metadata.name": name})
    if expire_after is not None:
        doc["spec"]["template"]["spec"]["expireAfter"] = expire_after
    doc["spec"]["limits"] = limits or {}
    if not doc["spec"]["limits"]:
        del doc["spec"]["limits"]
    doc["spec"]["disruption"] = {"budgets": budgets if budgets is not None else [{"nodes": "10%"}]}
    if mode:
        doc["spec"]["disruption"]["nodeLimitMode"] = mode
    return doc


def applied(
    name: str,
    limits: dict[str, str] | None = None,
    budgets: list[dict] | None = None,
    mode: str | None = None,
    expire_after: str | None = None,
) -> c.NodePoolApplied:
    return c.NodePoolApplied(nodepool=name, nodepool_object=pool_object(name, limits, budgets, mode, expire_after))


def created(
    claim: str, pool: str, *sizes: tuple[str, str], pods: list[str] | None = None, replacement_for: str | None = None
) -> c.NodeClaimCreated:
    """`sizes`: (cpu, memory) of each instance-type option; one 2-cpu/8Gi option by default."""
    options = [
        c.InstanceTypeOption(name=f"type-{cpu}-{mem}", capacity={"cpu": cpu, "memory": mem, "pods": "110"})
        for cpu, mem in (sizes or (("2", "8Gi"),))
    ]
    return c.NodeClaimCreated(
        nodeclaim=claim, nodepool=pool, instance_types=options, pods=pods or [], replacement_for=replacement_for
    )


def launched(
    claim: str, pool: str, cpu: str = "2", memory: str = "8Gi", zone: str | None = None
) -> c.NodeClaimLaunched:
    return c.NodeClaimLaunched(
        nodeclaim=claim,
        nodepool=pool,
        instance_type=f"type-{cpu}-{memory}",
        capacity={"cpu": cpu, "memory": memory, "pods": "110"},
        provider_id=f"sim:///{claim}",
        capacity_type="on-demand",
        zone=zone,
    )


def initialized(claim: str, pool: str) -> c.NodeClaimInitialized:
    return c.NodeClaimInitialized(nodeclaim=claim, nodepool=pool)


def failed(claim: str, pool: str) -> c.NodeClaimLaunchFailed:
    return c.NodeClaimLaunchFailed(nodeclaim=claim, nodepool=pool, reason="InsufficientCapacity")


def terminated(claim: str, pool: str) -> c.NodeClaimTerminated:
    return c.NodeClaimTerminated(nodeclaim=claim, nodepool=pool, reason="disrupted")


def decided(
    decision: str,
    pool: str,
    reason: str,
    candidates: list[str],
    replacements: list[str] | None = None,
    forceful: bool | None = None,
) -> c.DisruptionDecided:
    """`forceful`: as the disruption service marks it (by the reason) unless given."""
    return c.DisruptionDecided(
        decision_id=decision,
        nodepool=pool,
        reason=reason,
        candidates=candidates,
        replacements=replacements or [],
        forceful=reason in c.FORCEFUL_REASONS if forceful is None else forceful,
    )


def deletion_requested(claim: str, pool: str, reason: str = "Manual") -> c.NodeClaimDeletionRequested:
    return c.NodeClaimDeletionRequested(nodeclaim=claim, nodepool=pool, reason=reason)


def live_nodes(pool: str, n: int, prefix: str = "n") -> list[c.Event]:
    """n claims of `pool` created, launched and initialized."""
    out: list[c.Event] = []
    for i in range(n):
        name = f"{pool}-{prefix}{i}"
        out += [created(name, pool), launched(name, pool), initialized(name, pool)]
    return out


def entries(events: list[c.Event], start: datetime = T0, step: timedelta = timedelta(seconds=1)) -> list[LogEntry]:
    """A log of these events, one `step` apart, numbered from 1."""
    return [LogEntry(i, e.stream_id, e.TYPE, e.payload(), start + i * step) for i, e in enumerate(events, 1)]


def new(event: c.Event, at: datetime = T0, **kwargs: Any) -> NewEvent:
    return NewEvent.of(event, occurred_at=at, producer="test", **kwargs)


def scenario_doc(name: str = "t", **spec: Any) -> dict[str, Any]:
    """A Scenario document starting at T0 for an hour, with `spec` fields added or replaced."""
    return {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": name},
        "spec": {"start": T0.replace(hour=9).isoformat(), "duration": "1h", **spec},
    }


def startup_tainted_pool(name: str = "general") -> dict[str, Any]:
    """A NodePool whose nodes start with an agent's NoExecute taint."""
    pool = nodepool_doc(**{"metadata.name": name})
    pool["spec"]["template"]["spec"]["startupTaints"] = [{"key": "agent-not-ready", "effect": "NoExecute"}]
    return pool


async def insert_applied(raw: Any, pool: str) -> int:
    """A NodePoolApplied written straight into the table on an open transaction of `raw` (no
    store, no commit): a writer caught between drawing its position and committing."""
    event = new(applied(pool))
    return await raw.fetchval(
        "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at)"
        " VALUES ($1, $2, 1, $3, $4::jsonb, $5) RETURNING position",
        event.event_id,
        event.stream_id,
        event.type,
        json.dumps(event.data),
        event.occurred_at,
    )


def catalog_answer(options: Any) -> list[dict[str, Any]]:
    """`CloudProvider.instance_types()`'s answer for these `InstanceOption`s."""
    return [
        {
            "name": o.name,
            "capacity": {k: str(v) for k, v in o.capacity.items()},
            "allocatable": {k: str(v) for k, v in o.allocatable.items()},
            "labels": dict(o.labels),
            "offerings": [{"zone": f.zone, "capacityType": f.capacity_type, "price": f.price} for f in o.offers],
        }
        for o in options
    ]


class CatalogCloud:
    """A cloud that only answers `instance_types`, the same for every node class."""

    def __init__(self, options: Any) -> None:
        self.options = options

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        return catalog_answer(self.options)


def gates_recorded(
    log: list[RecordedEvent], gates: dict[str, bool], at: timedelta = timedelta(seconds=1)
) -> list[RecordedEvent]:
    """`log` with the disruption service's `FeatureGatesObserved` of `gates`, `at` after its
    first event (when a service starts leading), at the end of the positions (no other event's
    position moves, so a decision's observed position still names what it saw)."""
    event = c.FeatureGatesObserved(service="disruption", gates=gates)
    when = log[0].occurred_at + at
    fact = RecordedEvent(
        position=max(e.position for e in log) + 1,
        event_id=uuid.UUID(int=len(log) + 1),
        stream_id=event.stream_id,
        version=1,
        type=event.TYPE,
        schema_version=event.SCHEMA_VERSION,
        data=event.payload(),
        metadata=Metadata("disruption"),
        occurred_at=when,
        recorded_at=when,
    )
    return [*log, fact]
