"""The store's contract, run against every path an append can take (chosen by the store's
constructor, never by patching it): planned from this process's memory, after an unlocked read,
or with the pools locked for the whole transaction. Each test also checks that its path was the
one taken, and that the log's hash chain is intact after it (the write links each event from
what its snapshot knew)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from shared.policy.counters import BudgetExceeded, InvalidTransition, LimitExceeded, NodeLimitExceeded
from shared.store import integrity
from shared.store.eventstore import (
    NO_STREAM,
    Append,
    ConcurrencyConflict,
    DuplicateMismatch,
    EventStore,
    InvalidEvent,
    NotLeader,
)
from shared.store.leader import LeaderLock
from tests.factories import T0, applied, created, decided, initialized, launched, live_nodes, new, terminated

PATHS = {
    "memory": {"memory": True, "optimistic": True},
    "read": {"memory": False, "optimistic": True},
    "locked": {"memory": False, "optimistic": False},
}


@pytest.fixture(params=list(PATHS))
async def store(request: pytest.FixtureRequest, migrated_url: str) -> AsyncIterator[EventStore]:
    store = EventStore.connect(migrated_url, pool_size=4, **PATHS[request.param])
    store.path = request.param  # type: ignore[attr-defined]
    yield store
    taken = store.paths
    if store.path == "memory":  # type: ignore[attr-defined]
        assert taken.recalled > 0, taken
    elif store.path == "read":  # type: ignore[attr-defined]
        assert taken.recalled == 0 and taken.read > 0, taken
    else:
        assert taken.recalled == taken.read == 0 and taken.locked > 0, taken
    assert (await integrity.check(store)).problems == []
    await store.close()


async def seed(store: EventStore, *events) -> list[int]:
    """Append each event alone: a claim's creation starts its stream, the rest go at any version."""
    out = []
    for event in events:
        expected = NO_STREAM if event.TYPE == "NodeClaimCreated" else None
        out += await store.append(event.stream_id, expected, [new(event)])
    return out


# --- appends, versions, idempotence ----------------------------------------------------------------


async def test_an_append_gets_increasing_positions_and_dense_versions(store: EventStore):
    positions = await seed(store, applied("p", {"nodes": "5"}), created("c1", "p"), launched("c1", "p"))
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert [e.version for e in await store.read_stream("nodeclaim-c1")] == [1, 2]
    assert await store.stream_version("nodeclaim-c1") == 2


async def test_an_expected_version_that_moved_is_a_conflict_and_writes_nothing(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}), created("c1", "p"))
    late = launched("c1", "p")
    with pytest.raises(ConcurrencyConflict) as refused:
        await store.append(late.stream_id, 0, [new(late)])
    assert (refused.value.expected, refused.value.actual) == (0, 1)
    await store.append(late.stream_id, 1, [new(late)])
    assert await store.stream_version(late.stream_id) == 2


async def test_a_unit_of_several_streams_is_all_or_nothing(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}), created("c1", "p"))
    good, bad = created("c2", "p"), launched("c1", "p")
    with pytest.raises(ConcurrencyConflict):
        await store.append_unit([Append(good.stream_id, NO_STREAM, [new(good)]), Append(bad.stream_id, 5, [new(bad)])])
    assert await store.stream_version(good.stream_id) == 0
    assert (await store.counters("p"))["p"].nodes == 1
    await seed(store, created("c3", "p"))  # and the pool goes on


async def test_a_redelivered_unit_gets_its_first_positions_and_draws_none(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    claim = new(created("c1", "p"))
    first = await store.append("nodeclaim-c1", NO_STREAM, [claim])
    assert await store.append("nodeclaim-c1", NO_STREAM, [claim]) == first
    again = await store.append_units([[Append("nodeclaim-c1", NO_STREAM, [claim])]] * 2)
    assert again == [first, first]
    (after,) = await seed(store, launched("c1", "p"))
    assert after == first[0] + 1  # no position was drawn by the redeliveries
    assert (await store.counters("p"))["p"].nodes == 1


async def test_a_unit_partly_stored_is_refused(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    one, two = new(created("c1", "p")), new(created("c2", "p"))
    await store.append("nodeclaim-c1", NO_STREAM, [one])
    (result,) = await store.append_units(
        [[Append("nodeclaim-c1", NO_STREAM, [one]), Append("nodeclaim-c2", NO_STREAM, [two])]]
    )
    assert isinstance(result, DuplicateMismatch)
    assert await store.stream_version("nodeclaim-c2") == 0


async def test_an_event_that_breaks_its_contract_or_its_stream_is_refused(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    claim = new(created("c1", "p"))
    with pytest.raises(InvalidEvent, match="cannot be appended to stream"):
        await store.append("nodeclaim-other", NO_STREAM, [claim])
    broken = dataclasses.replace(claim, data={"nodepool": "p"}, validated=False)
    with pytest.raises(InvalidEvent, match="does not match its contract"):
        await store.append("nodeclaim-c1", NO_STREAM, [broken])
    await store.append("nodeclaim-c1", NO_STREAM, [claim])


async def test_in_a_batch_a_refused_unit_fails_alone(store: EventStore):
    await seed(store, applied("p", {"nodes": "1"}))
    one, two = created("c1", "p"), created("c2", "p")
    results = await store.append_units(
        [[Append(one.stream_id, NO_STREAM, [new(one)])], [Append(two.stream_id, NO_STREAM, [new(two)])]]
    )
    assert isinstance(results[0], list) and isinstance(results[1], LimitExceeded)
    assert (await store.counters("p"))["p"].nodes == 1
    await seed(store, launched("c1", "p"))  # the pool goes on


# --- every reservation rule ---------------------------------------------------------------------------


async def test_a_node_limit_refuses_with_its_numbers(store: EventStore):
    await seed(store, applied("p", {"nodes": "2"}))
    await store.reserve_launch([created("a", "p"), created("b", "p")], occurred_at=T0, producer="t")
    with pytest.raises(LimitExceeded) as refused:
        await store.reserve_launch([created("c", "p")], occurred_at=T0, producer="t")
    assert refused.value.numbers["exceeded"] == {"nodes": ["3", "2"]}
    await seed(store, launched("a", "p"), terminated("a", "p"))
    await store.reserve_launch([created("c", "p")], occurred_at=T0, producer="t")  # room again


async def test_a_resource_limit_counts_the_largest_option_until_launch(store: EventStore):
    await seed(store, applied("p", {"cpu": "10"}))
    await store.reserve_launch([created("big", "p", ("2", "8Gi"), ("8", "32Gi"))], occurred_at=T0, producer="t")
    with pytest.raises(LimitExceeded) as refused:
        await store.reserve_launch([created("x", "p", ("4", "16Gi"))], occurred_at=T0, producer="t")
    assert refused.value.numbers["exceeded"] == {"cpu": ["12", "10"]}
    await seed(store, launched("big", "p", cpu="2"))
    await store.reserve_launch([created("x", "p", ("4", "16Gi"))], occurred_at=T0, producer="t")


async def test_a_budget_refuses_with_its_numbers(store: EventStore):
    await seed(store, applied("p", budgets=[{"nodes": "1"}]), *live_nodes("p", 3))
    await store.reserve_disruption(decided("d1", "p", "Drifted", ["p-n0"]), occurred_at=T0, producer="t")
    with pytest.raises(BudgetExceeded) as refused:
        await store.reserve_disruption(decided("d2", "p", "Drifted", ["p-n1"]), occurred_at=T0, producer="t")
    assert "due to blocking budget" in str(refused.value)
    await seed(store, terminated("p-n0", "p"))
    await store.reserve_disruption(decided("d2", "p", "Drifted", ["p-n1"]), occurred_at=T0, producer="t")


async def test_expiration_passes_a_zero_budget(store: EventStore):
    await seed(store, applied("p", budgets=[{"nodes": "0"}]), *live_nodes("p", 2))
    with pytest.raises(BudgetExceeded):
        await store.reserve_disruption(decided("d1", "p", "Drifted", ["p-n0"]), occurred_at=T0, producer="t")
    await store.reserve_disruption(decided("d2", "p", "Expired", ["p-n0"]), occurred_at=T0, producer="t")
    assert (await store.counters("p"))["p"].disrupting_by_reason() == {"Expired": 1}


@pytest.mark.parametrize("mode", ["Hard", "Soft"])
async def test_the_node_hard_limit_refuses_a_replacement_and_soft_mode_lets_it_pass(store: EventStore, mode: str):
    await seed(store, applied("p", {"nodes": "3"}, budgets=[{"nodes": "100%"}], mode=mode), *live_nodes("p", 3))
    decision = decided("d0", "p", "Drifted", ["p-n0"], replacements=["r0"])
    replacement = created("r0", "p", replacement_for="d0")
    if mode == "Hard":
        with pytest.raises(NodeLimitExceeded) as refused:
            await store.reserve_disruption(decision, [replacement], occurred_at=T0, producer="t")
        assert "due to node hard limit" in str(refused.value)
        assert await store.read_stream("nodeclaim-r0") == []
        await store.reserve_disruption(decided("d1", "p", "Drifted", ["p-n0"]), occurred_at=T0, producer="t")
    else:
        await store.reserve_disruption(decision, [replacement], occurred_at=T0, producer="t")
        assert (await store.counters("p"))["p"].nodes == 4


async def test_a_step_of_a_claim_never_created_is_an_invalid_transition(store: EventStore):
    await seed(store, applied("p", {"nodes": "3"}))
    with pytest.raises(InvalidTransition):
        await seed(store, launched("ghost", "p"))
    await seed(store, created("c1", "p"), launched("c1", "p"), initialized("c1", "p"), terminated("c1", "p"))
    with pytest.raises(InvalidTransition, match="not in flight"):
        await seed(store, launched("c1", "p"))  # it ended
    counters = (await store.counters("p"))["p"]
    assert (counters.nodes, counters.in_flight, counters.initialized) == (0, 0, 0)


# --- fences -------------------------------------------------------------------------------------------


async def test_a_fenced_reservation_holds_only_while_its_lock_does(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}), created("warm", "p"))  # memory knows the pool
    lock = LeaderLock(store, 0x636F_6E74_7261)
    assert await lock.try_acquire()
    await store.reserve_launch([created("a", "p")], occurred_at=T0, producer="t", fence=lock.fence)
    await lock.release()
    with pytest.raises(NotLeader):
        await store.reserve_launch([created("b", "p")], occurred_at=T0, producer="t", fence=lock.fence)
    assert await store.stream_version("nodeclaim-b") == 0
    await seed(store, created("after", "p"))  # an unfenced append goes on as before
