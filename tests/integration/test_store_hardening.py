"""Redeliveries under races, malformed events and false replacements: the store refuses or
deduplicates them, and a batch still commits the units that are fine."""

from __future__ import annotations

import asyncio

import pytest

from shared.events.envelope import Metadata, NewEvent
from shared.policy.audit import LogEntry, replay
from shared.policy.counters import InvalidTransition
from shared.store.eventstore import NO_STREAM, Append, EventStore, InvalidEvent
from tests.factories import T0, applied, created, decided, live_nodes, new


async def seed(store: EventStore, *events) -> None:
    for event in events:
        await store.append(event.stream_id, None, [new(event)])


async def test_racing_redeliveries_of_a_reservation_return_the_same_positions(migrated_url: str):
    stores = [EventStore.connect(migrated_url) for _ in range(2)]
    try:
        await seed(stores[0], applied("p", {"nodes": "100"}))
        for i in range(10):
            event = new(created(f"c{i}", "p"))
            a, b = await asyncio.gather(*(s.append(event.stream_id, NO_STREAM, [event]) for s in stores))
            assert a == b
        assert (await stores[0].counters("p"))["p"].nodes == 10
    finally:
        for s in stores:
            await s.close()


async def test_the_same_unit_twice_in_one_batch_is_written_once(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    event = new(created("a", "p"))
    unit = [Append(event.stream_id, NO_STREAM, [event])]
    first, second = await store.append_units([unit, unit])
    assert first == second
    assert (await store.counters("p"))["p"].nodes == 1


async def test_a_retried_reservation_is_recognised(store: EventStore):
    await seed(store, applied("p", {"nodes": "1"}))
    claim = created("a", "p")
    first = await store.reserve_launch([claim], occurred_at=T0, producer="scheduler-0")
    assert await store.reserve_launch([claim], occurred_at=T0, producer="scheduler-1") == first


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            NewEvent("nodeclaim-a", "NodeClaimCreated", {"nodeclaim": "a", "instance_types": []}, T0, Metadata("t")),
            "nodepool: Field required",
        ),
        (NewEvent("nodeclaim-a", "NodeClaimExploded", {}, T0, Metadata("t")), "unknown event type"),
        (new(created("b", "p")), "cannot be appended to stream nodeclaim-a"),
        (
            NewEvent("nodeclaim-a", "NodeClaimCreated", created("b", "p").payload(), T0, Metadata("t")),
            "NodeClaimCreated for nodeclaim-b cannot be appended to stream nodeclaim-a",
        ),
    ],
    ids=["missing-field", "unknown-type", "wrong-stream", "payload-of-another-stream"],
)
async def test_malformed_events_are_refused_and_change_nothing(store: EventStore, event, message):
    await seed(store, applied("p", {"nodes": "5"}))
    with pytest.raises(InvalidEvent, match=message):
        await store.append("nodeclaim-a", None, [event])
    assert await store.head_position() == 1


async def test_a_malformed_unit_does_not_sink_its_batch(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    good = new(created("good", "p"))
    bad = NewEvent("nodeclaim-bad", "NodeClaimCreated", {"nodepool": "p", "nodeclaim": "bad"}, T0, Metadata("t"))
    ok, refused = await store.append_units(
        [[Append(good.stream_id, NO_STREAM, [good])], [Append(bad.stream_id, NO_STREAM, [bad])]]
    )
    assert isinstance(ok, list)
    assert isinstance(refused, InvalidEvent) and "instance_types" in str(refused)


async def test_only_planned_replacements_may_pass_a_soft_node_limit(store: EventStore):
    await seed(store, applied("p", {"nodes": "3"}, budgets=[{"nodes": "100%"}], mode="Soft"), *live_nodes("p", 3))
    with pytest.raises(InvalidTransition, match="no live decision"):
        await store.reserve_launch([created("sneaky", "p", replacement_for="made-up")], occurred_at=T0, producer="t")
    decision = decided("d", "p", "Drifted", ["p-n0"], replacements=["r0"])
    await store.reserve_disruption(decision, [created("r0", "p", replacement_for="d")], occurred_at=T0, producer="t")
    assert (await store.counters("p"))["p"].nodes == 4  # Soft: the planned replacement passes the limit
    with pytest.raises(InvalidTransition, match="no live decision"):
        await store.reserve_launch([created("r1", "p", replacement_for="d")], occurred_at=T0, producer="t")


def test_the_audit_reports_malformed_and_unplaced_events():
    log = [
        LogEntry(1, "nodepool-p", "NodePoolApplied", applied("p").payload(), T0),
        LogEntry(2, "nodeclaim-x", "NodeClaimCreated", {"nodeclaim": "x"}, T0),
        LogEntry(3, "nodeclaim-y", "NodeClaimCreated", {"nodeclaim": "y", "nodepool": "p"}, T0),
        LogEntry(4, "nodeclaim-z", "NodeClaimLaunched", ["not", "a", "dict"], T0),
    ]
    out = replay(log)
    assert [(v.position, v.rule) for v in out.violations] == [(2, "payload"), (3, "payload"), (4, "payload")]


async def test_a_claim_moved_on_by_another_process_is_read_past_what_this_one_remembers(migrated_url: str):
    """Each store remembers claims as it last saw them; another process's events must still count."""
    from tests.factories import launched, terminated

    here, elsewhere = EventStore.connect(migrated_url), EventStore.connect(migrated_url)
    try:
        await seed(here, applied("p", {"cpu": "100"}))
        claim = created("c1", "p", ("8", "32Gi"))
        await here.append(claim.stream_id, NO_STREAM, [new(claim)])  # reserves 8 cpu
        moved = launched("c1", "p", cpu="2", memory="8Gi")
        await elsewhere.append(moved.stream_id, 1, [new(moved)])  # settles to 2 cpu
        ended = terminated("c1", "p")
        assert await here.append(ended.stream_id, 2, [new(ended)])  # `here` must know the head is 2
        counters = (await here.counters("p"))["p"]
        assert (counters.nodes, counters.in_flight, counters.resources) == (0, 0, {})
        log = [e async for page in here.log_entries() for e in page]
        assert replay(log).pools["p"].comparable() == counters.comparable()
    finally:
        await here.close()
        await elsewhere.close()


@pytest.mark.parametrize("locked", [False, True], ids=["optimistic", "locked"])
async def test_an_append_that_fails_before_it_commits_leaves_no_trace_in_what_the_store_remembers(
    store: EventStore, migrated_url: str, monkeypatch: pytest.MonkeyPatch, locked: bool
):
    """Optimistic, the write statement is the commit: the failure comes just before it. Locked,
    it comes between the write and the COMMIT. (A response lost after the server committed is
    a redelivery: the retry finds the stored event ids.)"""
    from shared.store import write as writes
    from tests.factories import launched

    if locked:
        store = EventStore.connect(migrated_url, memory=False, optimistic=False)
    await seed(store, applied("p", {"nodes": "5"}))
    first = created("c1", "p")
    await store.append(first.stream_id, NO_STREAM, [new(first)])
    write = writes.write_batch

    async def write_then_fail(raw, snapshot, planned, **kw):
        if locked:
            await write(raw, snapshot, planned, **kw)
        raise RuntimeError("connection lost before commit")

    monkeypatch.setattr(writes, "write_batch", write_then_fail)
    moved = launched("c1", "p")
    try:
        with pytest.raises(RuntimeError, match="before commit"):
            await store.append(moved.stream_id, 1, [new(moved)])
        monkeypatch.setattr(writes, "write_batch", write)
        assert await store.stream_version(moved.stream_id) == 1
        await store.append(moved.stream_id, 1, [new(moved)])  # the store still knows c1 at version 1
        assert (await store.counters("p"))["p"].in_flight == 0
    finally:
        if locked:
            await store.close()


async def test_an_append_that_waited_for_a_pool_lock_reads_what_the_holder_committed(
    store: EventStore, migrated_url: str, monkeypatch: pytest.MonkeyPatch
):
    """The lock and the read share one statement, whose snapshot predates the wait: the store
    must notice that the pool moved and read again, or it would miss the holder's events."""
    from shared.store import write as writes
    from tests.factories import launched, terminated

    store = EventStore.connect(migrated_url, memory=False, optimistic=False)  # the locked path, whose read can wait
    await seed(store, applied("p", {"nodes": "5"}))
    claim = created("c1", "p")
    await store.append(claim.stream_id, NO_STREAM, [new(claim)])
    gate, holds = asyncio.Event(), asyncio.Event()
    write = writes.write_batch

    async def write_and_hold(raw, snapshot, planned, **kw):
        done = await write(raw, snapshot, planned, **kw)
        if any(r.event.type == "NodeClaimLaunched" for r in planned.rows):
            holds.set()  # written, not committed: the pool's row is locked
            await gate.wait()  # commit only when the other append is queued on the pool's row
        return done

    monkeypatch.setattr(writes, "write_batch", write_and_hold)
    holder = EventStore.connect(migrated_url, memory=False, optimistic=False)
    try:
        moved = launched("c1", "p")
        holding = asyncio.create_task(holder.append(moved.stream_id, 1, [new(moved)]))
        await asyncio.wait_for(holds.wait(), 30)
        ended = terminated("c1", "p")
        waiting = asyncio.create_task(store.append(ended.stream_id, 2, [new(ended)]))
        for _ in range(500):
            async with store.driver_connection() as raw:
                if await raw.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
                ):
                    break
            await asyncio.sleep(0.01)
        gate.set()
        await holding
        assert await waiting == [4]  # the pool's event, the claim's three
    finally:
        await holder.close()
        await store.close()
    counters = (await store.counters("p"))["p"]
    assert (counters.nodes, counters.in_flight) == (0, 0)


async def test_an_optimistic_append_whose_pool_moved_before_its_write_writes_nothing_and_tries_again(
    store: EventStore, migrated_url: str, monkeypatch: pytest.MonkeyPatch
):
    """Between the unlocked read and the write, another store appends to the same pool: the write
    finds the pool's version moved, writes nothing, and the append is checked again against what
    the other store committed (here, its claim now takes the pool's last node)."""
    from shared.policy.counters import LimitExceeded
    from shared.store import write as write_module

    await seed(store, applied("p", {"nodes": "1"}))
    elsewhere = EventStore.connect(migrated_url)
    write = write_module.write_batch
    mine = created("c-mine", "p")
    writes: list[bool] = []

    async def someone_else_first(raw, snapshot, planned, **kw):
        ours = bool(planned.rows) and planned.rows[0].event.stream_id == mine.stream_id
        if ours and not writes:
            other = created("c-other", "p")
            await elsewhere.append(other.stream_id, NO_STREAM, [new(other)])
        done = await write(raw, snapshot, planned, **kw)
        if ours:
            writes.append(done is not None)
        return done

    monkeypatch.setattr(write_module, "write_batch", someone_else_first)
    try:
        with pytest.raises(LimitExceeded):
            await store.append(mine.stream_id, NO_STREAM, [new(mine)])
    finally:
        await elsewhere.close()
    assert writes == [False]  # the first write found the pool moved; the retry's check refused
    assert await store.stream_version(mine.stream_id) == 0
    counters = (await store.counters("p"))["p"]
    assert (counters.nodes, counters.version) == (1, 2)
    log = [e async for page in store.log_entries() for e in page]
    assert replay(log).pools["p"].comparable() == counters.comparable()


@pytest.mark.parametrize("holder_commits", [True, False], ids=["holder-commits", "holder-rolls-back"])
async def test_an_optimistic_write_that_waits_on_a_pool_lock_checks_the_version_the_holder_leaves(
    store: EventStore, monkeypatch: pytest.MonkeyPatch, holder_commits: bool
):
    """The write statement queues behind a transaction that holds the pool's row and bumps its
    version. If that commits, the write sees the new version once it has the lock, writes nothing
    (no position drawn) and the append is checked again; if it rolls back, the write goes on."""
    from shared.store import write as write_module

    await seed(store, applied("p", {"nodes": "5"}))
    holder = await store.session_connection()
    write = write_module.write_batch
    writes: list[bool] = []
    finishing: list[asyncio.Task] = []

    async def finish(transaction) -> None:
        for _ in range(500):
            if await holder.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                " AND datname = current_database()"
            ):
                break
            await asyncio.sleep(0.01)
        await (transaction.commit() if holder_commits else transaction.rollback())

    async def write_behind_holder(raw, snapshot, planned, **kw):
        if not finishing:
            transaction = holder.transaction()
            await transaction.start()
            await holder.execute("UPDATE nodepool_counters SET version = version + 1 WHERE nodepool = 'p'")
            finishing.append(asyncio.create_task(finish(transaction)))
        done = await write(raw, snapshot, planned, **kw)
        writes.append(done is not None)
        return done

    monkeypatch.setattr(write_module, "write_batch", write_behind_holder)
    claim = created("c1", "p")
    try:
        (position,) = await store.append(claim.stream_id, NO_STREAM, [new(claim)])
        await finishing[0]
    finally:
        await holder.close()
    assert writes == ([False, True] if holder_commits else [True])
    assert position == 2  # the pool's event, then this one: the lost write drew no position
    counters = (await store.counters("p"))["p"]
    assert (counters.nodes, counters.version) == (1, 3 if holder_commits else 2)
