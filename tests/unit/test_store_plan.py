"""The store's plan, without PostgreSQL: what a batch writes, how each unit ends, and when a
snapshot from memory cannot vouch for the outcome."""

from __future__ import annotations

import pytest

from shared.policy.counters import ClaimState, LimitExceeded, PoolCounters, evolve
from shared.store.errors import ConcurrencyConflict, DuplicateMismatch
from shared.store.plan import TooOld, WritePlan, plan
from shared.store.snapshot import Snapshot, Source, needs
from shared.store.units import NO_STREAM, Append, unit
from tests.factories import applied, created, launched, new, pool_object

POOL = "p"


def pool(nodes_limit: str = "2", **counts) -> PoolCounters:
    counters = PoolCounters(POOL, spec=pool_object(POOL, {"nodes": nodes_limit}), version=1, **counts)
    return counters


def snapshot(source: Source = Source.READ, *, pools=None, claims=None, heads=None, stored=None) -> Snapshot:
    pools = pools if pools is not None else {POOL: pool()}
    return Snapshot(source, pools, claims or {}, heads or {}, stored or {}, {n: p.version for n, p in pools.items()})


def create(name: str) -> list[Append]:
    return unit(f"nodeclaim-{name}", NO_STREAM, [new(created(name, POOL))])


def test_a_granted_claim_is_one_row_and_the_pool_moves_on_while_the_snapshot_does_not():
    before = snapshot()
    planned = plan([create("c1")], before)
    assert isinstance(planned, WritePlan)
    (row,) = planned.rows
    assert (row.version, row.pool) == (1, POOL) and "limit_check" in row.data
    assert planned.pools[POOL].nodes == 1 and planned.pools[POOL].version == 2
    assert before.pools[POOL].nodes == 0 and before.pools[POOL].version == 1  # untouched
    assert planned.heads["nodeclaim-c1"] == 1 and planned.claims["c1"].phase == "in_flight"
    position = {row.event.event_id: 42}
    assert planned.outcomes(position) == [[42]]


def test_units_are_checked_in_order_against_what_the_ones_before_left():
    planned = plan([create("c1"), create("c2"), create("c3")], snapshot())
    assert isinstance(planned, WritePlan)
    assert [i for i, _, _ in planned.written] == [0, 1]
    assert isinstance(planned.settled[2], LimitExceeded)
    assert planned.settled[2].numbers["exceeded"] == {"nodes": ["3", "2"]}
    assert planned.pools[POOL].nodes == 2


@pytest.mark.parametrize("source", [Source.READ, Source.LOCKED])
def test_a_refusal_from_a_read_is_an_outcome(source: Source):
    full = pool(nodes=2, in_flight=2)
    planned = plan([create("c9")], snapshot(source, pools={POOL: full}))
    assert isinstance(planned, WritePlan) and planned.rows == ()
    assert isinstance(planned.settled[0], LimitExceeded)


def test_memory_cannot_vouch_for_a_refusal_or_a_stored_id():
    full = pool(nodes=2, in_flight=2)
    assert isinstance(plan([create("c9")], snapshot(Source.MEMORY, pools={POOL: full})), TooOld)
    event = create("c1")
    stored = {event[0].events[0].event_id: 7}
    assert isinstance(plan([event], snapshot(Source.MEMORY, stored=stored)), TooOld)
    assert plan([event], snapshot(Source.READ, stored=stored)).outcomes({}) == [[7]]  # type: ignore[union-attr]


def test_a_unit_twice_in_a_batch_shares_its_outcome_and_a_partial_repeat_is_refused():
    first = create("c1")
    planned = plan([first, first], snapshot())
    assert isinstance(planned, WritePlan) and len(planned.rows) == 1
    assert planned.outcomes({planned.rows[0].event.event_id: 5}) == [[5], [5]]
    other = create("c2")
    mixed = [*first, *other]
    planned = plan([first, mixed], snapshot())
    assert isinstance(planned.settled[1], DuplicateMismatch)  # type: ignore[union-attr]


def test_a_unit_that_fails_halfway_leaves_nothing_of_itself():
    good, late = create("c1"), unit("nodeclaim-c0", 3, [new(launched("c0", POOL))])
    planned = plan([[*good, *late], create("c2")], snapshot(heads={"nodeclaim-c0": 1}))
    assert isinstance(planned, WritePlan)
    assert isinstance(planned.settled[0], ConcurrencyConflict)
    assert [planned.rows[0].event.stream_id] == ["nodeclaim-c2"]
    assert planned.pools[POOL].nodes == 1  # only c2's
    assert "c1" not in planned.claims and planned.heads.get("nodeclaim-c1", 0) == 0


def test_a_claims_state_in_the_snapshot_is_copied_before_it_evolves():
    state = ClaimState(POOL, {"cpu": 2}, "in_flight")
    counters = pool(nodes=1, in_flight=1)
    before = snapshot(pools={POOL: counters}, claims={"c0": state}, heads={"nodeclaim-c0": 1})
    planned = plan([unit("nodeclaim-c0", 1, [new(launched("c0", POOL))])], before)
    assert isinstance(planned, WritePlan)
    assert planned.claims["c0"].phase == "launched" and state.phase == "in_flight"


def test_what_a_batch_needs_comes_from_its_events_alone():
    applied_pool = applied("q")
    units = [create("c1"), unit(applied_pool.stream_id, None, [new(applied_pool)])]
    need = needs(units)
    assert need.pools == ("p", "q") and need.claims == {"c1"}
    assert need.streams == {"nodeclaim-c1", "nodepool-q"} and not need.replaces and not need.empty
    replacing = created("r1", POOL, replacement_for="d1")
    assert needs([unit(replacing.stream_id, NO_STREAM, [new(replacing)])]).replaces == {"d1"}
    assert needs([unit("nodeclaim-x", 3, [])]).empty


def test_the_plan_agrees_with_the_rules_folded_one_event_at_a_time():
    """The same events through `plan` and through the rules directly end at the same counters."""
    events = [created(f"c{i}", POOL) for i in range(2)] + [launched("c0", POOL)]
    planned = plan([unit(e.stream_id, None, [new(e)]) for e in events], snapshot())
    assert isinstance(planned, WritePlan)
    folded, claims = pool(), {}
    for e in events:
        evolve(folded, claims, e.TYPE, e.payload(), 0)
    assert planned.pools[POOL].comparable() == folded.comparable()
