"""Appends checked against what the process remembers (one round trip, no read): taken only when
the write can prove that memory right, and never a different answer from the one a read gives."""

from __future__ import annotations

import random
from typing import Any

import pytest

from shared.events import contracts as c
from shared.events.envelope import Metadata, NewEvent
from shared.policy.audit import Replay
from shared.policy.counters import InvalidTransition, LimitExceeded, ReservationError, check
from shared.store.eventstore import NO_STREAM, EventStore
from tests.factories import T0, applied, created, decided, initialized, launched, new, terminated


async def append(store: EventStore, event: c.Event, expected: int | None = None) -> list[int]:
    return await store.append(event.stream_id, expected, [new(event)])


async def fold(store: EventStore) -> Replay:
    replay = Replay()
    async for page in store.log_entries():
        replay.feed(page)
    return replay


async def assert_counters_true(store: EventStore) -> None:
    replay = await fold(store)
    assert replay.violations == []
    live = await store.counters()
    assert {n: p.comparable() for n, p in live.items()} == {n: p.comparable() for n, p in replay.pools.items()}


async def test_after_a_pools_first_event_a_lifecycle_takes_no_read(store: EventStore):
    await append(store, applied("p", {"nodes": "10"}))
    assert (store.paths.locked, store.paths.recalled) == (1, 0)  # the pool's row is created under lock
    for event in (created("c1", "p"), launched("c1", "p"), initialized("c1", "p"), terminated("c1", "p")):
        await append(store, event, NO_STREAM if isinstance(event, c.NodeClaimCreated) else None)
    assert (store.paths.locked, store.paths.read, store.paths.recalled) == (1, 0, 4)
    await assert_counters_true(store)


async def test_a_pool_another_process_moved_is_read_again(store: EventStore, migrated_url: str):
    elsewhere = EventStore.connect(migrated_url)
    try:
        await append(store, applied("p", {"nodes": "2"}))
        await append(store, created("c1", "p"), NO_STREAM)
        await append(elsewhere, created("c2", "p"), NO_STREAM)  # the pool is full now
        with pytest.raises(LimitExceeded):
            await append(store, created("c3", "p"), NO_STREAM)
    finally:
        await elsewhere.close()
    assert await store.stream_version("nodeclaim-c3") == 0
    await assert_counters_true(store)


async def test_a_refusal_is_never_answered_from_memory(store: EventStore, migrated_url: str):
    """Memory says the pool is full; another process freed a node meanwhile. Only a write proves
    memory right, and a refusal writes nothing: the store reads, and grants."""
    elsewhere = EventStore.connect(migrated_url)
    try:
        await append(store, applied("p", {"nodes": "1"}))
        await append(store, created("c1", "p"), NO_STREAM)
        await append(elsewhere, terminated("c1", "p"))
        assert await append(store, created("c2", "p"), NO_STREAM)
    finally:
        await elsewhere.close()
    assert store.paths.read == 1
    await assert_counters_true(store)


async def test_a_claim_seen_before_another_process_moved_it_is_read_again(store: EventStore, migrated_url: str):
    """This store saw c1 live; another ends it. A later read of the pool (for c2) does not fold c1,
    so this store's picture of c1 is older than the pool it now remembers: a decision naming c1,
    which budgets would allow, must read c1 again, and be refused."""
    elsewhere = EventStore.connect(migrated_url)
    try:
        await append(store, applied("p", {"nodes": "10"}, budgets=[{"nodes": "100%"}]))
        for event in (created("c1", "p"), launched("c1", "p"), initialized("c1", "p"), created("c2", "p")):
            await append(store, event)
        await append(elsewhere, terminated("c1", "p"))
        await append(store, launched("c2", "p"))  # memory of p is stale: read, then remembered again
        await append(store, initialized("c2", "p"))  # a node to count: the budget alone would allow one
        recalled = store.paths.recalled
        with pytest.raises(InvalidTransition, match="candidate c1 is not a live NodeClaim"):
            await append(store, decided("d1", "p", "Underutilized", ["c1"]), NO_STREAM)
    finally:
        await elsewhere.close()
    assert store.paths.recalled == recalled
    await assert_counters_true(store)


async def test_a_redelivery_after_a_recalled_append_returns_the_first_positions(store: EventStore):
    await append(store, applied("p", {"nodes": "10"}))
    event = new(created("c1", "p"))
    first = await store.append(event.stream_id, NO_STREAM, [event])
    assert await store.append(event.stream_id, NO_STREAM, [event]) == first
    assert (await store.counters("p"))["p"].nodes == 1


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "in-a-batch"])
async def test_a_redelivery_checked_from_memory_costs_no_position(store: EventStore, batched: bool):
    """Memory cannot know that an event id is stored (a fact re-sent with any version passes its
    check): the write finds it and writes nothing, before it draws a position, and the read
    answers. A gap would make the relay wait on it."""
    from shared.store.eventstore import unit

    await append(store, applied("p", {"nodes": "10"}))
    await append(store, created("c1", "p"), NO_STREAM)
    fact = new(c.NodeClaimRegistered(nodeclaim="c1", nodepool="p", node="c1"))
    (first,) = await store.append(fact.stream_id, None, [fact])
    others = [new(created(f"c{i}", "p")) for i in range(2, 5)] if batched else []
    results = await store.append_units(
        [unit(e.stream_id, NO_STREAM, [e]) for e in others] + [unit(fact.stream_id, None, [fact])]
    )
    assert results[-1] == [first]
    assert store.paths.recalled == 2
    await append(store, initialized("c1", "p"))
    positions = [e[0] async for page in store.log_entries() for e in page]
    assert positions == list(range(1, len(positions) + 1))


async def test_a_pool_remembered_from_an_applied_spec_does_not_follow_changes_to_the_callers_dict(
    store: EventStore,
):
    """The remembered pool keeps its own copy of the spec an event applied: a caller that reuses
    its payload after the append cannot loosen the limits the next appends are checked against."""
    payload = applied("p", {"nodes": "1"}).payload()
    await store.append("nodepool-p", NO_STREAM, [NewEvent("nodepool-p", "NodePoolApplied", payload, T0, Metadata("t"))])
    payload["nodepool_object"]["spec"]["limits"]["nodes"] = "5"
    await append(store, created("c1", "p"), NO_STREAM)
    with pytest.raises(LimitExceeded):
        await append(store, created("c2", "p"), NO_STREAM)


def _operation(rng: random.Random, claims: dict[str, str], decisions: int) -> c.Event:
    name = rng.choice(sorted(claims))
    pool = claims[name]
    roll = rng.random()
    if roll < 0.3:
        return created(name, pool, rng.choice([("2", "8Gi"), ("4", "16Gi")]))
    if roll < 0.45:
        return launched(name, pool, cpu=rng.choice(["2", "4"]), memory="8Gi")
    if roll < 0.6:
        return initialized(name, pool)
    if roll < 0.75:
        return terminated(name, pool)
    candidates = rng.sample([n for n, p in claims.items() if p == pool], k=rng.randint(1, 2))
    return decided(f"d{decisions}", pool, rng.choice(["Underutilized", "Drifted"]), candidates)


@pytest.mark.parametrize("seed", range(4))
async def test_two_processes_in_any_interleaving_get_the_answers_a_read_gives(migrated_url: str, seed: int):
    """Random operations through two stores; before each, the rules are run on a fold of the log
    as it stands. A store grants exactly what the rules grant, and the counters stay true."""
    rng = random.Random(seed)
    stores = [EventStore.connect(migrated_url) for _ in range(2)]
    claims = {f"c{i}": ("p" if i % 2 else "q") for i in range(8)}
    try:
        await append(stores[0], applied("p", {"nodes": "3"}, budgets=[{"nodes": "1"}]))
        await append(stores[1], applied("q", {"cpu": "8"}, budgets=[{"nodes": "50%"}]))
        for step in range(60):
            event = _operation(rng, claims, step)
            store = rng.choice(stores)
            replay = await fold(store)
            data: dict[str, Any] = event.payload()
            pool = replay.pool(data["nodepool"])
            expected = check(pool, replay.claims, event.TYPE, data, T0).violation
            head = await store.stream_version(event.stream_id)
            given = NO_STREAM if isinstance(event, c.DisruptionDecided) else rng.choice([None, head])
            try:
                await append(store, event, given)
            except ReservationError as refused:
                assert expected is not None, f"step {step}: {event.TYPE} refused: {refused}"
                assert refused.rule == expected.rule
            else:
                assert expected is None, f"step {step}: {event.TYPE} granted, but {expected.detail}"
        await assert_counters_true(stores[0])
        assert sum(s.paths.recalled for s in stores) > 0 and sum(s.paths.read for s in stores) > 0
    finally:
        for store in stores:
            await store.close()
