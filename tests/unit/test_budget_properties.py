"""Invariants of the budget policy, checked on generated budgets and instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.cron import parse_cron
from shared.api.nodepool import Budget, DisruptionReason
from shared.policy.budgets import REASONS, DisruptionBudgets
from shared.policy.calendar import budget_calendar
from shared.policy.schedule import CompiledSchedule, epoch

START = datetime(2026, 1, 1, tzinfo=UTC)
instants = st.integers(0, 2 * 365 * 24 * 3600).map(lambda s: START + timedelta(seconds=s))


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    single = st.integers(low, high).map(str)
    # croniter 7 reads a one-value range `N-N` as `*`; robfig (upstream) reads {N}: keep the oracle to N < M.
    span = st.lists(st.integers(low, high), min_size=2, max_size=2, unique=True).map(lambda t: f"{min(t)}-{max(t)}")
    stepped = st.tuples(st.integers(low, high), st.integers(2, 9)).map(lambda t: f"{t[0]}/{t[1]}")
    listed = st.lists(st.integers(low, high), min_size=2, max_size=4, unique=True).map(
        lambda v: ",".join(map(str, sorted(v)))
    )
    return st.one_of(st.just("*"), single, span, stepped, listed)


# Day fields are '*' or explicit sets, where robfig's and croniter's day-matching rules agree.
crons = st.one_of(
    st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly"]),
    st.tuples(_field(0, 59), _field(0, 23), _field(1, 28), _field(1, 12), _field(0, 6)).map(" ".join),
)
durations = st.sampled_from(
    ["1m", "10m", "30m", "1h", "1h30m", "8h", "9h", "24h", "48h", "720h", "87600h", "2562047h47m"]
)
"""Up to Go's bound (292 years): a calendar must not walk the whole duration back."""
zones = st.sampled_from([None, "America/Chicago", "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata"])
nodes_values = st.one_of(st.integers(0, 100).map(lambda n: f"{n}%"), st.integers(0, 50).map(str))
reasons = st.none() | st.lists(st.sampled_from(list(DisruptionReason)), min_size=1, max_size=3, unique=True)


@st.composite
def budgets(draw) -> Budget:
    scheduled = draw(st.booleans())
    return Budget(
        nodes=draw(nodes_values),
        reasons=draw(reasons),
        schedule=draw(crons) if scheduled else None,
        duration=draw(durations) if scheduled else None,
        time_zone=draw(zones) if scheduled else None,
    )


budget_lists = st.lists(budgets(), min_size=1, max_size=5)


def _le(a: int | None, b: int | None) -> bool:
    """a <= b where None is unbounded."""
    return b is None or (a is not None and a <= b)


@settings(max_examples=200, deadline=None)
@given(budget_lists, instants, st.integers(0, 300), st.integers(0, 300))
def test_remaining_is_never_negative(budget_list, at, nodes, disrupting):
    status = DisruptionBudgets(budget_list).status(at, nodes, disrupting)
    for reason in REASONS:
        left, allowed = status.remaining(reason), status.allowed(reason)
        assert left == (None if allowed is None else max(allowed - disrupting, 0))


@settings(max_examples=200, deadline=None)
@given(budget_lists, budgets(), instants, st.integers(0, 300))
def test_adding_a_budget_never_raises_allowed(budget_list, extra, at, nodes):
    before = DisruptionBudgets(budget_list).status(at, nodes)
    after = DisruptionBudgets([*budget_list, extra]).status(at, nodes)
    for reason in REASONS:
        assert _le(after.allowed(reason), before.allowed(reason))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 100).map(lambda n: f"{n}%"), min_size=1, max_size=5), instants, st.integers(0, 500))
def test_percent_budgets_are_monotone_in_node_count(percents, at, nodes):
    pool = DisruptionBudgets([Budget(nodes=p) for p in percents])
    for reason in REASONS:
        assert _le(pool.status(at, nodes).allowed(reason), pool.status(at, nodes + 1).allowed(reason))


@settings(max_examples=60, deadline=None)
@given(budget_lists, instants, st.integers(1, 21 * 24 * 60), st.integers(0, 200), st.data())
def test_calendar_agrees_with_point_queries(budget_list, start, span_minutes, nodes, data):
    pool = DisruptionBudgets(budget_list)
    end = start + timedelta(minutes=span_minutes)
    calendar = budget_calendar(pool, start, end, nodes)
    for reason in REASONS:
        rows = [w for w in calendar.windows if w.reason == reason]
        assert rows[0].start == start and rows[-1].end == end
        assert all(a.end == b.start and a.allowed != b.allowed for a, b in pairwise(rows))
    offsets = data.draw(st.lists(st.integers(0, span_minutes * 60 - 1), min_size=1, max_size=12))
    for offset in offsets:
        at = start + timedelta(seconds=offset)
        status = pool.status(at, nodes)
        for w in calendar.windows:
            if w.start <= at < w.end:
                assert w.allowed == status.allowed(w.reason), (w, at)


@settings(max_examples=300, deadline=None)
@given(crons, durations, instants)
def test_schedule_agrees_with_croniter(cron, duration, at):
    """Upstream's rule, evaluated with croniter: the first hit after now-duration is not after now."""
    span = timedelta(
        minutes=Budget(nodes="0", schedule=cron, duration=duration).duration_timedelta.total_seconds() / 60
    )
    ours = CompiledSchedule(parse_cron(cron), span).is_active(epoch(at))
    next_hit = croniter(cron, at - span).get_next(datetime)
    assert ours == (next_hit <= at)


@settings(max_examples=100, deadline=None)
@given(crons, durations, zones, instants)
def test_windows_agree_with_is_active(cron, duration, zone, at):
    schedule = CompiledSchedule(
        parse_cron(cron), Budget(nodes="0", schedule=cron, duration=duration).duration_timedelta, zone or "UTC"
    )
    t = epoch(at)
    inside = any(a <= t < b for a, b in schedule.windows(t - 3 * 86400, t + 3 * 86400))
    assert inside == schedule.is_active(t)
