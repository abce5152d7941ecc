"""Replacements in another pool than their candidates', on a real PostgreSQL: reserved in their
target pool exactly as launches are, so a concurrent fuzz of both into one pool never passes its
limits, and the audit of the log that results finds nothing."""

from __future__ import annotations

import asyncio
import random
from decimal import Decimal

from shared.events import contracts as c
from shared.policy.audit import LogEntry, replay
from shared.policy.counters import LimitExceeded
from shared.store.eventstore import NO_STREAM, Append, EventStore, first_event_id
from tests.factories import T0, applied, created, decided, live_nodes, new

SOURCES = ("lo-a", "lo-b", "lo-c")
NODES, CPU = 12, 30


async def seed(store: EventStore, *events: c.Event) -> None:
    for event in events:
        await store.append(event.stream_id, None, [new(event)])


def cross_decision(i: int, pool: str) -> tuple[c.DisruptionDecided, c.NodeClaimCreated]:
    """A drift decision of `pool` whose one replacement goes to `hi`, and that replacement."""
    name = f"hi-r{i}"
    decision = decided(f"d{i}", pool, "Drifted", [f"{pool}-n{i % 8}"], [name]).model_copy(
        update={"replacement_nodepools": {name: "hi"}}
    )
    size = random.Random(i).choice(("2", "4"))
    claim = created(name, "hi", (size, "8Gi"), replacement_for=decision.decision_id).model_copy(
        update={"replacement_from": pool}
    )
    return decision, claim


async def test_a_fuzz_of_replacements_and_launches_never_overruns_the_target_pool(migrated_url: str, store: EventStore):
    await seed(store, applied("hi", {"nodes": str(NODES), "cpu": str(CPU)}))
    for pool in SOURCES:
        await seed(store, applied(pool, budgets=[{"nodes": "100%"}]), *live_nodes(pool, 8))
    other = EventStore.connect(migrated_url, pool_size=10)  # a second process racing the first
    try:
        stores = (store, other)
        granted: list[str] = []

        async def launch(i: int) -> None:
            size = random.Random(1000 + i).choice(("1", "2", "4"))
            try:
                await stores[i % 2].reserve_launch(
                    [created(f"hi-l{i}", "hi", (size, "8Gi"))], occurred_at=T0, producer="t"
                )
            except LimitExceeded:
                return
            granted.append(f"hi-l{i}")

        async def replace_(i: int) -> None:
            decision, claim = cross_decision(i, SOURCES[i % len(SOURCES)])
            target = stores[(i + 1) % 2]
            try:
                if i % 2:  # with the decision, in its transaction
                    await target.reserve_disruption(decision, [claim], occurred_at=T0, producer="t")
                else:  # at validation, after the decision, as the commands do
                    await target.reserve_disruption(decision, occurred_at=T0, producer="t")
                    event = new(claim, event_id=first_event_id(claim.stream_id))
                    await target.append_unit([Append(claim.stream_id, NO_STREAM, [event])])
            except LimitExceeded:
                return
            granted.append(claim.nodeclaim)

        work = [launch(i) for i in range(40)] + [replace_(i) for i in range(24)]
        random.Random(7).shuffle(work)
        await asyncio.gather(*work)
    finally:
        await other.close()
    counters = (await store.counters("hi"))["hi"]
    assert counters.nodes == len(granted) <= NODES
    assert counters.resources["cpu"] <= Decimal(CPU)
    assert any(name.startswith("hi-r") for name in granted) and any(name.startswith("hi-l") for name in granted)
    log = [
        LogEntry(e.position, e.stream_id, e.type, e.data, e.occurred_at)
        async for page in store.read_all()
        for e in page
    ]
    assert replay(log).violations == []
