"""budgets[].timeZone: schedules in an IANA zone, across daylight-saving changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.api.cron import parse_cron
from shared.api.nodepool import Budget, DisruptionReason
from shared.policy.budgets import DisruptionBudgets
from shared.policy.schedule import CompiledSchedule, epoch


def active(schedule: str, duration: str, tz: str, at: datetime) -> bool:
    budgets = DisruptionBudgets([Budget(nodes="0", schedule=schedule, duration=duration, time_zone=tz)])
    return budgets.status(at, 10).allowed(DisruptionReason.EMPTY) == 0


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tz", "before", "after"),
    [
        # Chicago: CST (-6) until 2026-03-08, CDT (-5) after; 09:00 local is 15:00Z then 14:00Z.
        ("America/Chicago", utc(2026, 3, 6, 15, 0), utc(2026, 3, 9, 14, 0)),
        # Berlin: CET (+1) until 2026-03-29, CEST (+2) after; 09:00 local is 08:00Z then 07:00Z.
        ("Europe/Berlin", utc(2026, 3, 27, 8, 0), utc(2026, 3, 30, 7, 0)),
        # Back again in autumn: Chicago CDT -> CST on 2026-11-01.
        ("America/Chicago", utc(2026, 10, 30, 14, 0), utc(2026, 11, 2, 15, 0)),
        # Sydney (southern hemisphere): AEDT (+11) until 2026-04-05, AEST (+10) after.
        ("Australia/Sydney", utc(2026, 4, 2, 22, 0), utc(2026, 4, 5, 23, 0)),
    ],
)
def test_window_starts_at_local_nine_on_both_sides(tz, before, after):
    schedule = "0 9 * * *" if tz == "Australia/Sydney" else "0 9 * * mon-fri"
    for start in (before, after):
        assert not active(schedule, "8h", tz, start - timedelta(seconds=1))
        assert active(schedule, "8h", tz, start)
        assert active(schedule, "8h", tz, start + timedelta(hours=8) - timedelta(seconds=1))
        assert not active(schedule, "8h", tz, start + timedelta(hours=8))


def test_utc_default_is_upstream():
    at = utc(2026, 3, 9, 14, 0)
    assert not active("0 9 * * mon-fri", "8h", "UTC", at - timedelta(hours=6))
    assert (
        DisruptionBudgets([Budget(nodes="0", schedule="0 9 * * mon-fri", duration="8h")])
        .status(utc(2026, 3, 9, 9, 0), 10)
        .allowed(DisruptionReason.EMPTY)
        == 0
    )


def test_skipped_wall_time_has_no_hit():
    """02:30 does not exist in Chicago on 2026-03-08 (02:00 -> 03:00)."""
    s = CompiledSchedule(parse_cron("30 2 * * *"), timedelta(minutes=10), "America/Chicago")
    windows = s.windows(epoch(utc(2026, 3, 7, 0, 0)), epoch(utc(2026, 3, 10, 0, 0)))
    starts = [datetime.fromtimestamp(a, UTC) for a, _ in windows]
    assert starts == [utc(2026, 3, 7, 8, 30), utc(2026, 3, 9, 7, 30)]


def test_repeated_wall_time_hits_once():
    """01:30 happens twice in Chicago on 2026-11-01; the first (CDT, 06:30Z) is the hit."""
    s = CompiledSchedule(parse_cron("30 1 * * *"), timedelta(minutes=10), "America/Chicago")
    assert s.is_active(epoch(utc(2026, 11, 1, 6, 35)))
    assert not s.is_active(epoch(utc(2026, 11, 1, 7, 35)))
    windows = s.windows(epoch(utc(2026, 11, 1, 0, 0)), epoch(utc(2026, 11, 2, 0, 0)))
    assert [datetime.fromtimestamp(a, UTC) for a, _ in windows] == [utc(2026, 11, 1, 6, 30)]


def test_window_spanning_the_switch_lasts_its_real_duration():
    """A 3h window from 01:00 local on the spring-forward day ends 3 real hours later (05:00 CDT)."""
    s = CompiledSchedule(parse_cron("0 1 * * *"), timedelta(hours=3), "America/Chicago")
    ((a, b),) = s.windows(epoch(utc(2026, 3, 8, 0, 0)), epoch(utc(2026, 3, 8, 23, 0)))
    assert datetime.fromtimestamp(a, UTC) == utc(2026, 3, 8, 7, 0)
    assert b - a == 3 * 3600
