"""Cron schedules exactly as upstream Karpenter parses them (robfig/cron v3, standard parser).

Why not croniter for parsing: croniter accepts a superset (seconds, years, `L`, `W`, `#`, and
wrapping ranges) that upstream rejects, and users rely on upstream's error text, e.g.
`beginning of range (2) beyond end of range (1): tue-mon`. A parsed schedule is a set of allowed
values per field, which is also what the budget policy needs for interval arithmetic. croniter is
still used, as an independent oracle, by the tests.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

# The CRD pattern: loose on purpose (upstream relies on the runtime parser for the rest).
SCHEDULE_PATTERN = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"

_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {
    name: i + 1
    for i, name in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])
}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_INT_RE = re.compile(r"^[+-]?[0-9]+$")


class CronError(ValueError):
    """A schedule upstream's parser would refuse; the message is upstream's."""


@dataclass(frozen=True, slots=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] | None = None


_MINUTE = _Bounds(0, 59)
_HOUR = _Bounds(0, 23)
_DOM = _Bounds(1, 31)
_MONTH = _Bounds(1, 12, _MONTHS)
_DOW = _Bounds(0, 6, _DAYS)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """Allowed values per field. `dom_star`/`dow_star` keep robfig's day-matching rule: when either
    day field is unrestricted both must match, otherwise either may."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_star: bool
    dow_star: bool

    def matches_day(self, month: int, day: int, weekday_sun0: int) -> bool:
        if month not in self.months:
            return False
        dom = day in self.days_of_month
        dow = weekday_sun0 in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def can_fire(self) -> bool:
        """False for schedules no calendar day satisfies, such as `0 0 31 2 *`."""
        if not (self.dom_star or self.dow_star):
            return True
        if self.dow_star:
            return any(d <= _max_days(m) for m in self.months for d in self.days_of_month)
        return True  # dom is '*': every weekday occurs in every month


def _max_days(month: int) -> int:
    return 29 if month == 2 else calendar.monthrange(2001, month)[1]


def _parse_int(expr: str) -> int:
    if not _INT_RE.match(expr):
        raise CronError(f'failed to parse int from {expr}: strconv.Atoi: parsing "{expr}": invalid syntax')
    value = int(expr)
    if value < 0:
        raise CronError(f"negative number ({value}) not allowed: {expr}")
    return value


def _parse_value(expr: str, bounds: _Bounds) -> int:
    if bounds.names is not None and expr.lower() in bounds.names:
        return bounds.names[expr.lower()]
    return _parse_int(expr)


def _parse_range(expr: str, bounds: _Bounds) -> tuple[set[int], bool]:
    range_and_step = expr.split("/")
    low_high = range_and_step[0].split("-")
    single = len(low_high) == 1
    star = False
    if low_high[0] in ("*", "?"):
        start, end, star = bounds.low, bounds.high, True
    else:
        start = _parse_value(low_high[0], bounds)
        if len(low_high) == 1:
            end = start
        elif len(low_high) == 2:
            end = _parse_value(low_high[1], bounds)
        else:
            raise CronError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _parse_int(range_and_step[1])
        if single:
            end = bounds.high
        if step > 1:
            star = False
    else:
        raise CronError(f"too many slashes: {expr}")
    if start < bounds.low:
        raise CronError(f"beginning of range ({start}) below minimum ({bounds.low}): {expr}")
    if end > bounds.high:
        raise CronError(f"end of range ({end}) above maximum ({bounds.high}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise CronError(f"step of range should be a positive number: {expr}")
    return set(range(start, end + 1, step)), star


def _parse_field(field: str, bounds: _Bounds) -> tuple[set[int], bool]:
    values: set[int] = set()
    star = False
    for part in field.split(","):
        part_values, part_star = _parse_range(part, bounds)
        values |= part_values
        star = star or part_star
    return values, star


def parse_cron(spec: str) -> CronSchedule:
    """Parse a 5-field cron expression or descriptor; raises CronError with upstream's message."""
    text = spec.strip()
    if not text:
        raise CronError("empty spec string")
    if text.startswith("@"):
        if text not in _DESCRIPTORS:
            raise CronError(f"unrecognized descriptor: {text}")
        text = _DESCRIPTORS[text]
    fields = text.split()
    if fields and ("=" in fields[0]) and fields[0].split("=", 1)[0] in ("TZ", "CRON_TZ"):
        raise CronError(
            f"time zone prefixes are not supported in the schedule ({fields[0]}); set the budget's 'timeZone' instead"
        )
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    minutes, _ = _parse_field(fields[0], _MINUTE)
    hours, _ = _parse_field(fields[1], _HOUR)
    dom, dom_star = _parse_field(fields[2], _DOM)
    months, _ = _parse_field(fields[3], _MONTH)
    dow, dow_star = _parse_field(fields[4], _DOW)
    return CronSchedule(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days_of_month=frozenset(dom),
        months=frozenset(months),
        days_of_week=frozenset(dow),
        dom_star=dom_star,
        dow_star=dow_star,
    )
