"""A replay split by NodePool and joined equals one fold of the whole log (`Replay.joined`), or
says it cannot: the property behind `nodewright audit` folding on several cores."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.policy.audit import LogEntry, Partition, Replay, replay, split_pools
from shared.policy.counters import COUNTED_EVENTS
from tests.factories import applied, created, decided, entries, failed, initialized, launched, terminated

POOLS = ("a", "b", "c", "d")


def route(log: list[LogEntry], partitions: list[Partition]) -> tuple[list[list[LogEntry]], list[LogEntry]]:
    """What the store's partition query selects, done in memory: by the pool the payload names."""
    parts: list[list[LogEntry]] = [[] for _ in partitions]
    uncounted = []
    for entry in log:
        pool = entry.data.get("nodepool") if isinstance(entry.data, dict) else None
        pool = pool if isinstance(pool, str) else None
        for index, partition in enumerate(partitions):
            if pool in partition.pools or (
                partition.rest
                and (pool not in partition.assigned if pool is not None else entry.type in COUNTED_EVENTS)
            ):
                parts[index].append(entry)
                break
        else:
            uncounted.append(entry)
    return parts, uncounted


def routed_parts(log: list[LogEntry], workers: int) -> tuple[list[list[LogEntry]], list[LogEntry]]:
    sizes: dict[str, int] = {}
    for entry in log:
        pool = entry.data.get("nodepool")
        if isinstance(pool, str):
            sizes[pool] = sizes.get(pool, 0) + 1
    known = dict(list(sizes.items())[:-1])  # the last pool stands for one the counter table lacks
    return route(log, split_pools(known, workers))


def split_fold(log: list[LogEntry], workers: int, explain: str | None = None) -> Replay | None:
    routed, uncounted = routed_parts(log, workers)
    parts = []
    for share in routed:
        part = Replay(explain=explain, mentioned=set())
        part.feed(share)
        parts.append(part)
    last = max((e.position for e in uncounted), default=0)
    return Replay.joined(parts, [list(p.claims) for p in parts], (len(uncounted), last))


def same(a: Replay, b: Replay) -> None:
    assert (a.events, a.launches, a.disruptions, a.last_position) == (
        b.events,
        b.launches,
        b.disruptions,
        b.last_position,
    )
    assert a.violations == b.violations
    assert {n: p.comparable() for n, p in a.pools.items()} == {n: p.comparable() for n, p in b.pools.items()}
    assert [(c.position, c.text) for c in a.story] == [(c.position, c.text) for c in b.story]


@st.composite
def logs(draw, crossing: bool):
    """Pools (some never applied) with small limits, then claims going through their lifecycle,
    decisions over one or more candidates, and now and then a malformed payload. With
    `crossing`, some events name a pool other than their claim's, mention another pool's claims,
    or reuse a claim's name elsewhere."""
    applied_pools = [p for p in POOLS if draw(st.integers(0, 4))]
    events = [applied(p, {"nodes": str(draw(st.integers(1, 4)))}, budgets=[{"nodes": "1"}]) for p in applied_pools]
    live: dict[str, str] = {}
    for i in range(draw(st.integers(0, 40))):
        step = draw(st.sampled_from(["create", "launch", "init", "end", "fail", "disrupt", "broken"]))
        if step == "create" or not live:
            pool = draw(st.sampled_from(POOLS))
            name = draw(st.sampled_from(sorted(live))) if crossing and live and draw(st.booleans()) else f"c{i}"
            live[name] = pool
            events.append(created(name, pool))
            continue
        name = draw(st.sampled_from(sorted(live)))
        pool = draw(st.sampled_from(POOLS)) if crossing and draw(st.booleans()) else live[name]
        if step == "launch":
            events.append(launched(name, pool))
        elif step == "init":
            events.append(initialized(name, pool))
        elif step == "end":
            events.append(terminated(name, pool))
        elif step == "fail":
            events.append(failed(name, pool))
        elif step == "broken":
            events.append(_Raw(f"nodeclaim-{name}", "NodeClaimCreated", {"nodeclaim": name, "nodepool": pool}))
        else:
            mates = [n for n in sorted(live) if crossing or live[n] == live[name]]
            extra = draw(st.lists(st.sampled_from([*mates, "nobody"]), max_size=2))
            events.append(decided(f"d{i}", pool, "Empty", [name, *extra] if draw(st.booleans()) else [*extra, name]))
    return entries(events)


class _Raw:
    """An event as a buggy writer might have put it in the log."""

    def __init__(self, stream_id: str, kind: str, data: dict) -> None:
        self.stream_id, self.TYPE, self._data = stream_id, kind, data

    def payload(self) -> dict:
        return dict(self._data)


@settings(max_examples=150, deadline=None)
@given(logs(crossing=False), st.integers(1, 5))
def test_claims_that_stay_in_their_pool_split_and_join_to_the_same_fold(log, workers):
    whole = replay(log, explain="nodeclaim-c3")
    joined = split_fold(log, workers, explain="nodeclaim-c3")
    assert joined is not None
    same(joined, whole)


def names_in_two_parts(log: list[LogEntry], workers: int) -> set[str]:
    """Claim names that events of two different partitions name (as `nodeclaim` or a candidate):
    the only logs a join may refuse."""
    routed, _ = routed_parts(log, workers)
    parts: dict[str, set[int]] = {}
    for index, share in enumerate(routed):
        for entry in share:
            for name in [entry.data.get("nodeclaim"), *(entry.data.get("candidates") or [])]:
                if isinstance(name, str):
                    parts.setdefault(name, set()).add(index)
    return {name for name, where in parts.items() if len(where) > 1}


def test_claims_that_cross_pools_either_join_to_the_same_fold_or_refuse():
    """Both outcomes are checked, and both happen: a join equals the whole fold; a refusal comes
    only with a claim named in two partitions."""
    outcomes: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None, database=None)
    @given(logs(crossing=True), st.integers(2, 5))
    def check(log: list[LogEntry], workers: int) -> None:
        joined = split_fold(log, workers)
        if joined is None:
            assert names_in_two_parts(log, workers), "refused a log whose partitions share no claim"
            outcomes["refused"] += 1
        else:
            same(joined, replay(log))
            outcomes["joined"] += 1

    check()
    assert outcomes["joined"] and outcomes["refused"], outcomes


def test_a_claim_ended_from_another_partition_refuses_the_join():
    log = entries([applied("a"), applied("b"), created("x", "a"), terminated("x", "b"), applied("c")])
    assert split_fold(log, 2) is None
    assert [v.rule for v in replay(log).violations] == ["lifecycle"]


def test_a_name_created_in_two_partitions_refuses_the_join():
    log = entries([applied("a"), applied("b"), created("x", "a"), created("x", "b"), applied("c")])
    assert split_fold(log, 3) is None


def test_pools_are_dealt_largest_first_to_the_lightest_partition():
    parts = split_pools({"a": 100, "b": 60, "c": 50, "d": 10, "e": 0}, 2)
    assert [p.pools for p in parts] == [("a", "d", "e"), ("b", "c")]  # 110 events each
    assert parts[0].rest and parts[0].assigned == ("a", "b", "c", "d", "e")
    assert not parts[1].rest and parts[1].assigned == ()
    assert len(split_pools({"a": 1}, 4)) == 1
    assert split_pools({}, 4) == [Partition((), rest=True, assigned=())]


def test_a_decision_that_stops_at_an_unknown_candidate_still_refuses_the_join():
    # the check stops at "nobody", and the step then marks b's claim as disrupting in pool a
    log = entries(
        [applied("a"), applied("b"), created("x", "b"), decided("d", "a", "Empty", ["nobody", "x"]), applied("c")]
    )
    assert split_fold(log, 2) is None


def test_a_malformed_re_creation_of_another_partitions_claim_refuses_the_join():
    broken = _Raw("nodeclaim-x", "NodeClaimCreated", {"nodeclaim": "x", "nodepool": "a"})
    log = entries([applied("a"), applied("b"), created("x", "b"), broken, applied("c")])
    assert split_fold(log, 2) is None
