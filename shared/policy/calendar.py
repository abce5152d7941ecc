"""The budget calendar: for each reason, when may a pool's nodes be disrupted, and how many.

Nobody else has one (upstream issue #1939). Each budget contributes its active windows (interval
arithmetic from `schedule.py`, never minute stepping). A sweep over the windows' start and end
events tracks which budgets are active; between two events that set is constant, and its allowed
count per reason is the same minimum a point query computes (looked up once per distinct set).
Adjacent segments with the same count are merged.

A calendar's size is the caller's to bound (`max_windows`): a two-minute schedule opens 43,200
windows a month, and five years of them took 632 MB to list. Past the bound, CalendarTooLarge,
raised while counting, before the windows are built.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from shared.api.nodepool import DisruptionReason
from shared.policy.budgets import REASONS, BudgetError, CompiledBudget, DisruptionBudgets
from shared.policy.schedule import UTC_KEY, TooManyWindows, epoch

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CalendarWindow(NamedTuple):
    """One merged window. Instants are epoch seconds (a year can hold 10^5 windows); `start` and
    `end` give them as datetimes."""

    reason: DisruptionReason
    start_ts: float
    end_ts: float
    allowed: int | None  # None: no active budget, unbounded

    @property
    def start(self) -> datetime:
        return _EPOCH + timedelta(seconds=self.start_ts)

    @property
    def end(self) -> datetime:
        return _EPOCH + timedelta(seconds=self.end_ts)


@dataclass(frozen=True, slots=True)
class BudgetCalendar:
    start: datetime
    end: datetime
    time_zone: str
    windows: tuple[CalendarWindow, ...]
    errors: tuple[str, ...]


class CalendarTooLarge(ValueError):
    """The calendar would hold more windows than its caller's bound."""

    def __init__(self, most: int, why: str) -> None:
        super().__init__(why)
        self.most = most


def _active_intervals(budget: CompiledBudget, t1: float, t2: float, most: int | None) -> list[tuple[float, float]]:
    if budget.schedule_error is not None or budget.schedule is None:
        return [(t1, t2)]
    return budget.schedule.windows(t1, t2, most)


def pool_time_zone(budgets: DisruptionBudgets) -> str:
    """The zone of the pool's scheduled budgets when they share one; UTC otherwise."""
    zones = {b.schedule.tz_key for b in budgets.budgets if b.schedule is not None}
    return zones.pop() if len(zones) == 1 else UTC_KEY


def _budget_values(budgets: DisruptionBudgets, nodes: int) -> tuple[list[int | None], list[str]]:
    """Each budget's value while active, or None where evaluating it fails (the pool then fails closed)."""
    values: list[int | None] = []
    errors: list[str] = []
    for budget in budgets.budgets:
        try:
            if budget.schedule_error is not None:
                raise BudgetError(budget.schedule_error)
            values.append(budget.value(nodes))
        except BudgetError as exc:
            errors.append(str(exc))
            values.append(None)
    return values, errors


def budget_calendar(
    budgets: DisruptionBudgets, start: datetime, end: datetime, nodes: int, max_windows: int | None = None
) -> BudgetCalendar:
    """With `max_windows`, CalendarTooLarge when the budgets together open more windows than
    that in the span, or the calendar (all reasons) would list more."""
    t1, t2 = epoch(start), epoch(end)
    if t2 <= t1:
        raise ValueError("the calendar's end must be after its start")
    values, errors = _budget_values(budgets, nodes)
    events: list[tuple[float, int]] = []  # (instant, budget bit); a bit toggles at each window edge
    for i, budget in enumerate(budgets.budgets):
        most = None if max_windows is None else max_windows - len(events) // 2
        try:
            intervals = _active_intervals(budget, t1, t2, most)
        except TooManyWindows:
            why = f"its budgets' schedules open more than {max_windows:,} windows in the span, budget {i} past it"
            raise CalendarTooLarge(max_windows or 0, why) from None
        for a, b in intervals:
            events.append((a, 1 << i))
            events.append((b, 1 << i))
    events.sort()

    by_mask: dict[int, tuple[int | None, ...]] = {}

    def allowed_for(mask: int) -> tuple[int | None, ...]:
        active = [i for i in range(len(values)) if mask >> i & 1]
        if any(values[i] is None for i in active):
            return (0,) * len(REASONS)
        return tuple(
            min((values[i] for i in active if budgets.budgets[i].applies[r]), default=None) for r in range(len(REASONS))
        )

    rows: list[list[list]] = [[] for _ in REASONS]
    count = 0

    def emit(a: float, b: float, mask: int) -> None:
        nonlocal count
        per_reason = by_mask.get(mask)
        if per_reason is None:
            per_reason = by_mask[mask] = allowed_for(mask)
        for reason_rows, value in zip(rows, per_reason, strict=True):
            if reason_rows and reason_rows[-1][2] == value:
                reason_rows[-1][1] = b
            else:
                reason_rows.append([a, b, value])
                count += 1
        if max_windows is not None and count > max_windows:
            why = f"it would list more than {max_windows:,} windows"
            raise CalendarTooLarge(max_windows, why)

    mask, cursor = 0, t1
    for t, bit in events:
        if t > cursor:
            emit(cursor, t, mask)
            cursor = t
        mask ^= bit
    if t2 > cursor:
        emit(cursor, t2, mask)
    make = CalendarWindow._make
    windows = tuple(
        make((reason, a, b, value))
        for reason, reason_rows in zip(REASONS, rows, strict=True)
        for a, b, value in reason_rows
    )
    return BudgetCalendar(start, end, pool_time_zone(budgets), windows, tuple(errors))
