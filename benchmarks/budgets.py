"""Budget policy benchmark: point evaluation and a one-year calendar, each against a baseline.

- Point: `DisruptionBudgets.status` for a pool with 5 scheduled budgets (all three reasons),
  median per call; baseline: upstream's rule evaluated with croniter (the first hit after
  now - duration is not after now), the way a straightforward port would do it.
- Calendar: one year at minute resolution for the same 5 budgets via interval arithmetic;
  baseline: stepping minute by minute with the (fast) point evaluation, timed over 30 days and
  scaled to a year.

Each figure is the best of 5 rounds (as `timeit` advises: slower rounds measure the machine, not
the code); the worst round is printed beside it. Run: `make bench`. Targets: point <= 20 us,
calendar <= 1 s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from croniter import croniter

from shared.api.nodepool import Budget, DisruptionReason
from shared.policy.budgets import REASONS, DisruptionBudgets
from shared.policy.calendar import budget_calendar

BUDGETS = [
    Budget(
        nodes="0",
        reasons=[DisruptionReason.UNDERUTILIZED],
        schedule="0 9 * * mon-fri",
        duration="9h",
        time_zone="America/Chicago",
    ),
    Budget(nodes="20%", reasons=[DisruptionReason.EMPTY], schedule="@daily", duration="10m"),
    Budget(nodes="5", schedule="*/15 * * * *", duration="5m"),
    Budget(nodes="1", reasons=[DisruptionReason.DRIFTED], schedule="0 2 * * sat,sun", duration="4h"),
    Budget(nodes="10%", schedule="30 6 1,15 * *", duration="12h"),
]
START = datetime(2026, 1, 1, tzinfo=UTC)
ROUNDS = 5
YEAR = timedelta(days=365)


def per_call_us(fn, args_list, batch: int = 50) -> float:
    samples = []
    for i in range(0, len(args_list), batch):
        chunk = args_list[i : i + batch]
        t0 = time.perf_counter_ns()
        for args in chunk:
            fn(*args)
        samples.append((time.perf_counter_ns() - t0) / len(chunk) / 1000)
    return statistics.median(samples)


def croniter_status(at: datetime, nodes: int) -> dict:
    """The baseline: upstream's algorithm with croniter, evaluated afresh on each call."""
    values = []
    for budget in BUDGETS:
        tz_at = at.astimezone(__import__("zoneinfo").ZoneInfo(budget.time_zone)) if budget.time_zone else at
        span = budget.duration_timedelta
        active = croniter(budget.schedule, tz_at - span).get_next(datetime) <= tz_at
        if not active:
            values.append(None)
        elif budget.nodes.endswith("%"):
            values.append(-(-int(budget.nodes[:-1]) * nodes // 100))
        else:
            values.append(int(budget.nodes))
    return {
        r: min((v for b, v in zip(BUDGETS, values, strict=True) if v is not None and b.applies_to(r)), default=None)
        for r in REASONS
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    smoke = parser.parse_args().smoke
    points, rounds_of, step_days = (500, 1, 1) if smoke else (20_000, ROUNDS, 30)
    rng = random.Random(7)
    pool = DisruptionBudgets(BUDGETS)
    instants = [START + timedelta(seconds=rng.randrange(int(YEAR.total_seconds()))) for _ in range(points)]
    args = [(t, 40, 2) for t in instants]
    for t in instants[:500]:  # the two must agree before their speed is compared
        ours = pool.status(t, 40)
        assert {r: ours.allowed(r) for r in REASONS} == croniter_status(t, 40), t

    rounds = [per_call_us(pool.status, args) for _ in range(rounds_of)]
    ours_us = min(rounds)
    base_us = per_call_us(croniter_status, [(t, 40) for t in instants[: points // 10]], batch=20)
    print(f"point evaluation, 5 scheduled budgets, 3 reasons (median per call, best of {rounds_of} rounds)")
    print(f"  nodewright     {ours_us:8.2f} us   (target <= 20 us; worst round {max(rounds):.2f} us)")
    print(f"  croniter port  {base_us:8.2f} us   -> {base_us / ours_us:.0f}x slower")

    timings = []
    for _ in range(rounds_of):
        t0 = time.perf_counter()
        calendar = budget_calendar(pool, START, START + YEAR, 40)
        timings.append(time.perf_counter() - t0)
    ours_s = min(timings)
    t0 = time.perf_counter()
    minute = timedelta(minutes=1)
    at = START
    stop = START + timedelta(days=step_days)
    while at < stop:
        pool.status(at, 40)
        at += minute
    step_s = (time.perf_counter() - t0) * 365 / step_days
    print("one-year budget calendar at minute resolution, 5 budgets")
    print(
        f"  nodewright     {ours_s:8.3f} s    (target <= 1 s; {len(calendar.windows)} windows; "
        f"worst {max(timings):.3f} s)"
    )
    print(f"  minute steps   {step_s:8.3f} s    (timed over {step_days} days, scaled) -> {step_s / ours_s:.0f}x slower")


if __name__ == "__main__":
    main()
