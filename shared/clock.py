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
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class AcceleratedClock:
    """With a `gate` and no origin, the clock holds at `start` until the gate file holds the
    origin (`open`): `nodewright up` opens it once every process is ready, so a scenario's first
    minutes are not spent while services start (at 720x, 5 s of start-up is an hour)."""

    def __init__(
        self, start: datetime, speed: float = 1.0, origin: float | None = None, gate: Path | None = None
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("the clock's start needs a time zone")
        if speed <= 0:
            raise ValueError("the clock's speed must be positive")
        self.start = start
        self.speed = speed
        self.gate = gate
        self._origin = origin if origin is not None or gate is not None else time.time()

    @property
    def origin(self) -> float | None:
        """The wall time the clock read `start`; None while a gate holds it."""
        if self._origin is None and self.gate is not None:
            try:
                self._origin = float(self.gate.read_text())
            except (OSError, ValueError):  # not open yet, or being written
                return None
        return self._origin

    @origin.setter
    def origin(self, value: float) -> None:
        """Re-anchor the clock (a test slowing it at an instant keeps the instant it reads)."""
        self._origin = value

    def open(self) -> float:
        """Start a gated clock now, for every process that reads the same gate."""
        if self._origin is None:
            self._origin = time.time()
            if self.gate is not None:
                partial = self.gate.with_suffix(".tmp")
                partial.write_text(repr(self._origin))
                partial.replace(self.gate)  # readers see the whole number or nothing
        return self._origin

    def now(self) -> datetime:
        origin = self.origin
        if origin is None:
            return self.start
        return self.start + timedelta(seconds=(time.time() - origin) * self.speed)

    def wall_seconds(self, simulated: timedelta) -> float:
        """How long the wall clock takes to pass `simulated` time."""
        return simulated.total_seconds() / self.speed

    def environment(self) -> dict[str, str]:
        """What a child process needs to read the same instant."""
        env = {"NODEWRIGHT_CLOCK_START": self.start.isoformat(), "NODEWRIGHT_CLOCK_SPEED": repr(self.speed)}
        if self._origin is not None:
            env["NODEWRIGHT_CLOCK_ORIGIN"] = repr(self._origin)
        elif self.gate is not None:
            env["NODEWRIGHT_CLOCK_GATE"] = str(self.gate)
        return env


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


def clock_from(start: datetime | None, speed: float | None, origin: float | None, gate: Path | None = None) -> Clock:
    """The accelerated clock the settings describe, else the system clock."""
    if start is None:
        return SystemClock()
    return AcceleratedClock(start, speed or 1.0, origin, None if origin is not None else gate)
