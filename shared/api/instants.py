"""The instants nodewright computes with: from 1970 to before 9000, UTC.

Budgets look back from an instant for their schedule's last hit and forward by durations of up
to Go's 292 years; near year 1 or 9999 that walks off Python's calendar (an OverflowError).
Every instant a user gives (`budgets --at`, a Scenario's `spec.start`) is held to this range.
"""

from __future__ import annotations

from datetime import UTC, datetime

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def out_of_range(at: datetime) -> str | None:
    """Why the (offset-aware) instant cannot be used, or None."""
    if EARLIEST <= at < LATEST:
        return None
    return f"out of range: give an instant from {iso(EARLIEST)} to before {iso(LATEST)}"
