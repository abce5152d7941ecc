"""The `Clock` port: where every process reads "now".

- `SystemClock`: the wall clock (production).
- `AcceleratedClock`: a simulated instant that started at `start` when the wall clock read
  `origin`, and runs `speed` times faster. `nodewright up` gives every process the same three
  numbers (`NODEWRIGHT_CLOCK_START`, `_SPEED`, `_ORIGIN`), so they all read the same instant.
- `ManualClock`: moves only when told (tests, the offline simulator).

Policy code never calls a clock: the shells read it and pass `now` in.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class AcceleratedClock:
    def __init__(self, start: datetime, speed: float = 1.0, origin: float | None = None) -> None:
        if start.tzinfo is None:
            raise ValueError("the clock's start needs a time zone")
        if speed <= 0:
            raise ValueError("the clock's speed must be positive")
        self.start = start
        self.speed = speed
        self.origin = time.time() if origin is None else origin

    def now(self) -> datetime:
        return self.start + timedelta(seconds=(time.time() - self.origin) * self.speed)

    def wall_seconds(self, simulated: timedelta) -> float:
        """How long the wall clock takes to pass `simulated` time."""
        return simulated.total_seconds() / self.speed

    def environment(self) -> dict[str, str]:
        """What a child process needs to read the same instant."""
        return {
            "NODEWRIGHT_CLOCK_START": self.start.isoformat(),
            "NODEWRIGHT_CLOCK_SPEED": repr(self.speed),
            "NODEWRIGHT_CLOCK_ORIGIN": repr(self.origin),
        }


class ManualClock:
    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, by: timedelta) -> datetime:
        self._now += by
        return self._now

    def set(self, instant: datetime) -> None:
        self._now = instant


def clock_from(start: datetime | None, speed: float | None, origin: float | None) -> Clock:
    """The accelerated clock the settings describe, else the system clock."""
    if start is None:
        return SystemClock()
    return AcceleratedClock(start, speed or 1.0, origin)
