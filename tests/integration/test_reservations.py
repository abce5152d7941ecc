"""Strict reservations under concurrency, on a real PostgreSQL: limits and budgets hold exactly."""

from __future__ import annotations

import asyncio

from shared.events.contracts import NodeClaimCreated
from shared.policy.counters import BudgetExceeded, LimitExceeded, NodeLimitExceeded
from shared.store.eventstore import NO_STREAM, EventStore
from tests.factories import T0, applied, created, decided, initialized, launched, live_nodes, new


async def seed(store: EventStore, *events) -> None:
    for event in events:
        await store.append(event.stream_id, None, [new(event)])


async def test_fifty_concurrent_reservers_against_ten_nodes_get_exactly_ten(store: EventStore):
    await seed(store, applied("p", {"nodes": "10"}))

    async def reserve(i: int) -> bool:
        try:
            await store.reserve_launch([created(f"c{i}", "p")], occurred_at=T0, producer=f"scheduler-{i % 3}")
        except LimitExceeded:
            return False
        return True

    granted = await asyncio.gather(*(reserve(i) for i in range(50)))
    assert sum(granted) == 10
    counters = (await store.counters("p"))["p"]
    assert (counters.nodes, counters.in_flight) == (10, 10)


async def test_resource_limits_count_the_largest_option_until_launch(store: EventStore):
    await seed(store, applied("p", {"cpu": "10"}))
    big = created("big", "p", ("2", "8Gi"), ("8", "32Gi"))
    await store.reserve_launch([big], occurred_at=T0, producer="t")
    try:
        await store.reserve_launch([created("x", "p", ("4", "16Gi"))], occurred_at=T0, producer="t")
        raise AssertionError("the 8-cpu reservation must hold until launch")
    except LimitExceeded as exc:
        assert exc.numbers["exceeded"] == {"cpu": ["12", "10"]}
    await seed(store, launched("big", "p", cpu="2"))
    await store.reserve_launch([created("x", "p", ("4", "16Gi"))], occurred_at=T0, producer="t")
    counters = (await store.counters("p"))["p"]
    assert str(counters.resources["cpu"]) == "6"


async def test_the_granted_event_records_the_headroom_it_saw(store: EventStore):
    await seed(store, applied("p", {"nodes": "3", "cpu": "8"}))
    await store.reserve_launch([created("a", "p", pods=["default/web-1"])], occurred_at=T0, producer="t")
    (event,) = await store.read_stream("nodeclaim-a")
    assert event.data["limit_check"] == {
        "usage": {"cpu": "0", "nodes": "0"},
        "limits": {"cpu": "8", "nodes": "3"},
        "headroom": {"cpu": "8", "nodes": "3"},
    }


def _decision(i: int, candidate: str):
    return decided(f"d{i}", "p", "Drifted", [candidate])


async def test_concurrent_disruptions_get_exactly_the_budget(store: EventStore):
    await seed(store, applied("p", budgets=[{"nodes": "3"}]), *live_nodes("p", 20))

    async def disrupt(i: int) -> bool:
        try:
            await store.reserve_disruption(_decision(i, f"p-n{i}"), occurred_at=T0, producer=f"disruption-{i % 2}")
        except BudgetExceeded:
            return False
        return True

    granted = await asyncio.gather(*(disrupt(i) for i in range(20)))
    assert sum(granted) == 3
    counters = (await store.counters("p"))["p"]
    assert counters.disrupting_by_reason() == {"Drifted": 3}


async def test_replacements_are_created_with_their_decision_within_the_node_hard_limit(store: EventStore):
    await seed(store, applied("p", {"nodes": "4"}, budgets=[{"nodes": "100%"}]), *live_nodes("p", 3))
    replacement = created("r0", "p", replacement_for="d0")
    decision = decided("d0", "p", "Drifted", ["p-n0"], replacements=["r0"])
    await store.reserve_disruption(decision, [replacement], occurred_at=T0, producer="t")
    assert (await store.counters("p"))["p"].nodes == 4
    # the pool is at its node limit now: another replace is refused, a delete is not
    second = decided("d1", "p", "Drifted", ["p-n1"], replacements=["r1"])
    try:
        await store.reserve_disruption(second, [created("r1", "p", replacement_for="d1")], occurred_at=T0, producer="t")
        raise AssertionError("a replacement past limits.nodes must be refused in Hard mode")
    except NodeLimitExceeded as exc:
        assert exc.numbers["pool_nodes"] == 4 and exc.numbers["node_limit"] == 4
    assert await store.read_stream("nodeclaim-r1") == []
    await store.reserve_disruption(decided("d2", "p", "Drifted", ["p-n1"]), occurred_at=T0, producer="t")


async def test_every_lifecycle_event_keeps_the_counters_true(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}, budgets=[{"nodes": "100%"}]))
    await store.reserve_launch([created("a", "p"), created("b", "p")], occurred_at=T0, producer="t")
    from tests.factories import failed, terminated

    await seed(store, launched("a", "p"), initialized("a", "p"), failed("b", "p"))
    c = (await store.counters("p"))["p"]
    assert (c.nodes, c.in_flight, c.initialized) == (1, 0, 1)
    await store.reserve_disruption(decided("d", "p", "Empty", ["a"]), occurred_at=T0, producer="t")
    assert (await store.counters("p"))["p"].disrupting == {"a": ["Empty", "d"]}
    await seed(store, terminated("a", "p"))
    c = (await store.counters("p"))["p"]
    assert (c.nodes, c.in_flight, c.initialized, c.disrupting, c.resources.get("cpu", 0)) == (0, 0, 0, {}, 0)


async def test_reserve_launch_is_idempotent_by_event_id(store: EventStore):
    await seed(store, applied("p", {"nodes": "1"}))
    claim: NodeClaimCreated = created("a", "p")
    event = new(claim)
    first = await store.append(claim.stream_id, NO_STREAM, [event])
    assert await store.append(claim.stream_id, NO_STREAM, [event]) == first
    assert (await store.counters("p"))["p"].nodes == 1


async def test_a_command_across_pools_is_reserved_whole_or_not_at_all(store: EventStore):
    """One decision per pool in one transaction: each part is checked against its own pool's
    budget, and one refused part leaves every pool as it was."""
    await seed(
        store,
        applied("p", budgets=[{"nodes": "1"}]),
        applied("q", budgets=[{"nodes": "1"}]),
        *live_nodes("p", 2),
        *live_nodes("q", 2, prefix="m"),
    )

    def parts(first: str, second: str, p_names: list[str], q_names: list[str]):
        ids = [first, second]
        lead = decided(first, "p", "Underutilized", p_names).model_copy(update={"command_parts": ids})
        other = decided(second, "q", "Underutilized", q_names).model_copy(update={"command_parts": ids})
        return lead, other

    lead, other = parts("d1", "d2", ["p-n0"], ["q-m0", "q-m1"])  # two of q under a budget of one
    try:
        await store.reserve_disruption(lead, occurred_at=T0, producer="t", parts=[other])
        raise AssertionError("q's budget allows one")
    except BudgetExceeded as exc:
        assert exc.nodepool == "q"
    counters = await store.counters()
    assert counters["p"].disrupting == {} and counters["q"].disrupting == {}
    lead, other = parts("d3", "d4", ["p-n0"], ["q-m0"])
    await store.reserve_disruption(lead, occurred_at=T0, producer="t", parts=[other])
    counters = await store.counters()
    assert counters["p"].disrupting == {"p-n0": ["Underutilized", "d3"]}
    assert counters["q"].disrupting == {"q-m0": ["Underutilized", "d4"]}
