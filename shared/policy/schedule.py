"""When a scheduled budget is active: points and whole windows, in UTC or an IANA time zone.

Upstream's rule: a budget is active at `now` iff the first cron hit strictly after
`now - duration` is not after `now`, i.e. some hit h satisfies now - duration < h <= now. The
active set is therefore the union of [h, h + duration) over all hits.

Hits are wall-clock minutes in the budget's zone. A wall time that does not exist (the hour
skipped when clocks go forward) has no hit; a wall time that occurs twice (clocks go back) hits
once, at its first occurrence. This is robfig/cron's behaviour in a zone, and it keeps
`0 9 * * mon-fri` at 09:00 local time on both sides of a daylight-saving change.

Instants are float seconds since the epoch. Working per local day keeps both a point query and
a year-long calendar cheap: a day's hits are the same minute offsets on every matching day,
so their merged windows are computed once and shifted.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from shared.api.cron import CronSchedule

UTC_KEY = "UTC"
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86400
_LONGEST_DAY = 25 * 3600
_MINUTES_A_DAY = 25 * 60


class TooManyWindows(ValueError):
    """A schedule opens more windows in a span than its caller takes (`windows(most=...)`)."""

    def __init__(self, most: int) -> None:
        super().__init__(f"more than {most} windows")
        self.most = most


def epoch(at: datetime) -> float:
    if at.tzinfo is None:
        raise ValueError(f"instant {at.isoformat()} has no time zone; pass an aware datetime")
    return at.timestamp()


@functools.lru_cache(maxsize=65536)
def _day_start(tz_key: str, ordinal: int) -> tuple[float, bool]:
    """Local midnight of the day as an instant, and whether the UTC offset holds all day."""
    if tz_key == UTC_KEY:
        return float((ordinal - _EPOCH_ORDINAL) * _DAY), True
    tz = ZoneInfo(tz_key)
    day = date.fromordinal(ordinal)
    midnight = datetime(day.year, day.month, day.day, tzinfo=tz)
    following = date.fromordinal(ordinal + 1)
    next_midnight = datetime(following.year, following.month, following.day, tzinfo=tz)
    return midnight.timestamp(), midnight.utcoffset() == next_midnight.utcoffset()


def _merge_into(out: list[tuple[float, float]], start: float, end: float) -> None:
    if out and start <= out[-1][1]:
        if end > out[-1][1]:
            out[-1] = (out[-1][0], end)
    else:
        out.append((start, end))


def _runs(values: list[float], step: float) -> list[tuple[float, float]]:
    """Consecutive runs (first, last) in a sorted list whose members are `step` apart."""
    runs: list[tuple[float, float]] = []
    for v in values:
        if runs and v - runs[-1][1] == step:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


class CompiledSchedule:
    """A cron schedule with its duration and zone, ready for fast evaluation."""

    __slots__ = ("_day_match", "_day_minutes", "_day_windows", "_tz", "cron", "duration", "tz_key")

    def __init__(self, cron: CronSchedule, duration: timedelta, tz_key: str = UTC_KEY) -> None:
        self.cron = cron
        self.duration = duration.total_seconds()
        self.tz_key = tz_key
        self._tz = None if tz_key == UTC_KEY else ZoneInfo(tz_key)
        self._day_minutes = sorted(h * 60 + m for h in cron.hours for m in cron.minutes)
        windows: list[tuple[float, float]] = []
        if self.duration > 0:
            for first, last in _runs([float(m) for m in self._day_minutes], 1.0):
                _merge_into(windows, first * 60, last * 60 + self.duration)
        self._day_windows = windows
        self._day_match: dict[int, bool] = {}

    def _local_ordinal(self, t: float) -> int:
        if self._tz is None:
            return _EPOCH_ORDINAL + int(t // _DAY)
        return datetime.fromtimestamp(t, self._tz).toordinal()

    def _matches(self, ordinal: int) -> bool:
        hit = self._day_match.get(ordinal)
        if hit is None:
            if len(self._day_match) > 8192:
                self._day_match.clear()
            day = date.fromordinal(ordinal)
            hit = self._day_match[ordinal] = self.cron.matches_day(day.month, day.day, (day.weekday() + 1) % 7)
        return hit

    def _transition_day_hits(self, ordinal: int) -> list[float]:
        return _transition_day_hits(self.tz_key, ordinal, tuple(self._day_minutes))

    def is_active(self, t: float) -> bool:
        """Whether some hit h satisfies t - duration < h <= t."""
        if self.duration <= 0:
            return False
        low = t - self.duration
        ordinal = self._local_ordinal(t)
        while True:
            start, steady = _day_start(self.tz_key, ordinal)
            if start + _LONGEST_DAY <= low:
                return False
            if self._matches(ordinal):
                if steady:
                    i = bisect_right(self._day_minutes, (t - start) // 60) - 1
                    if i >= 0:
                        return start + self._day_minutes[i] * 60 > low
                else:
                    hits = self._transition_day_hits(ordinal)
                    i = bisect_right(hits, t) - 1
                    if i >= 0:
                        return hits[i] > low
            ordinal -= 1

    def windows(self, t1: float, t2: float, most: int | None = None) -> list[tuple[float, float]]:
        """The merged active intervals [start, end) that meet [t1, t2), clipped to it; with
        `most`, TooManyWindows as soon as there are more than that (a `*/2 * * * *` schedule
        opens 262,800 in a year), before they take the memory."""
        if self.duration <= 0 or t2 <= t1:
            return []
        merged: list[tuple[float, float]] = []
        first = self._last_day_with_hits(self._local_ordinal(t1) - 1, self._local_ordinal(t1 - self.duration) - 1)
        last = self._local_ordinal(t2)
        for ordinal in range(first, last + 1):
            if not self._matches(ordinal):
                continue
            start, steady = _day_start(self.tz_key, ordinal)
            if steady:
                for a, b in self._day_windows:
                    _merge_into(merged, start + a, start + b)
            else:
                for a, b in _runs(self._transition_day_hits(ordinal), 60.0):
                    _merge_into(merged, a, b + self.duration)
            if most is not None and len(merged) > most + _MINUTES_A_DAY:  # a day before t1 may hold as many
                raise TooManyWindows(most)
        clipped = [(max(a, t1), min(b, t2)) for a, b in merged if b > t1 and a < t2]
        if most is not None and len(clipped) > most:
            raise TooManyWindows(most)
        return clipped

    def _last_day_with_hits(self, ordinal: int, earliest: int) -> int:
        """The latest day from `ordinal` back to `earliest` with a hit, else `earliest`. Every
        hit on a day before `t1`'s is before `t1`, and a window is as long as any other, so from
        `t1` on the windows of earlier days lie inside that day's last one: a calendar need not
        walk back the whole duration (292 years at Go's bound: 106,000 days) but only to the
        last firing day, at most eight years back (`0 0 29 2 *` across 2100)."""
        while ordinal > earliest:
            if self._matches(ordinal):
                steady = _day_start(self.tz_key, ordinal)[1]
                if (self._day_minutes if steady else self._transition_day_hits(ordinal)) != []:
                    return ordinal
            ordinal -= 1
        return earliest


@functools.lru_cache(maxsize=1024)
def _transition_day_hits(tz_key: str, ordinal: int, day_minutes: tuple[int, ...]) -> list[float]:
    """Hit instants on a day whose UTC offset changes: skip missing wall times, keep the first
    occurrence of repeated ones."""
    tz = ZoneInfo(tz_key)
    day = date.fromordinal(ordinal)
    hits = []
    for minute in day_minutes:
        local = datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=tz)
        instant = local.timestamp()
        if datetime.fromtimestamp(instant, tz).replace(tzinfo=None) == local.replace(tzinfo=None):
            hits.append(instant)
    return sorted(hits)
