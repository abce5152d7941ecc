"""`nodewright budgets`: allowed disruptions at an instant, or the budget calendar over a span."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.table import Table

from shared.api.nodepool import NodePool
from shared.policy.budgets import BudgetStatus, DisruptionBudgets
from shared.policy.calendar import BudgetCalendar, budget_calendar
from shared.policy.limits import NodeLimit


class UsageError(ValueError):
    """Bad arguments; the command exits 2."""


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""Instants budgets are computed at: a schedule looks back from an instant for its last hit, and
near year 1 (or 9999) that walks off the calendar."""
LONGEST_CALENDAR = timedelta(days=366)


def parse_instant(text: str, option: str, now: datetime | None = None) -> datetime:
    """RFC 3339 with an offset (`2026-11-23T09:00:00Z`), or `now` (the caller's clock)."""
    if text == "now" and now is not None:
        return now
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not an RFC 3339 time such as 2026-11-23T09:00:00Z") from None
    if value.tzinfo is None:
        raise UsageError(f"{option}: {text!r} has no UTC offset; add Z or +hh:mm")
    if not EARLIEST <= value < LATEST:
        span = f"from {iso(EARLIEST)} to before {iso(LATEST)}"
        raise UsageError(f"{option}: {text!r} is out of range: give an instant {span}")
    return value


def calendar_span(start: datetime, end: datetime) -> None:
    """A calendar lists every budget change: over centuries it would never end."""
    if end <= start:
        raise UsageError("--to must be after --from")
    if end - start > LONGEST_CALENDAR:
        raise UsageError(f"--from/--to: a calendar spans at most {LONGEST_CALENDAR.days} days")


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def select(pools: list[NodePool], name: str | None) -> list[NodePool]:
    if name is None:
        return pools
    chosen = [p for p in pools if p.name == name]
    if not chosen:
        raise UsageError(f"--nodepool: no NodePool named {name!r} (have: {', '.join(p.name for p in pools)})")
    return chosen


def point_report(pool: NodePool, at: datetime, nodes: int, disrupting: int) -> dict[str, Any]:
    status: BudgetStatus = DisruptionBudgets.of(pool).status(at, nodes, disrupting)
    limit = NodeLimit.of(pool, nodes)
    return {
        "nodepool": pool.name,
        "at": iso(at),
        "nodes": nodes,
        "disrupting": disrupting,
        "reasons": {str(r): {"allowed": b.allowed, "remaining": b.remaining} for r, b in status.reasons.items()},
        "nodeLimit": {
            "limit": limit.limit,
            "headroom": limit.headroom,
            "excess": limit.excess,
            "mode": str(limit.mode),
        },
        "errors": list(status.errors),
    }


def calendar_report(pool: NodePool, start: datetime, end: datetime, nodes: int) -> dict[str, Any]:
    calendar: BudgetCalendar = budget_calendar(DisruptionBudgets.of(pool), start, end, nodes)
    zone = ZoneInfo(calendar.time_zone)
    return {
        "nodepool": pool.name,
        "from": iso(start),
        "to": iso(end),
        "nodes": nodes,
        "timeZone": calendar.time_zone,
        "windows": [
            {
                "reason": str(w.reason),
                "start": iso(w.start),
                "end": iso(w.end),
                "startLocal": w.start.astimezone(zone).isoformat(),
                "endLocal": w.end.astimezone(zone).isoformat(),
                "allowed": w.allowed,
            }
            for w in calendar.windows
        ],
        "errors": list(calendar.errors),
    }


def render_json(reports: list[dict[str, Any]]) -> str:
    return json.dumps(reports[0] if len(reports) == 1 else reports, indent=2)


def _shown(value: int | None) -> str:
    return "unbounded" if value is None else str(value)


def print_point(console: Console, report: dict[str, Any]) -> None:
    console.print(
        f"NodePool {report['nodepool']} at {report['at']} (nodes {report['nodes']}, disrupting {report['disrupting']})"
    )
    table = Table()
    for column in ("reason", "allowed", "remaining"):
        table.add_column(column)
    for reason, row in report["reasons"].items():
        table.add_row(reason, _shown(row["allowed"]), _shown(row["remaining"]))
    console.print(table)
    limit = report["nodeLimit"]
    if limit["limit"] is None:
        console.print(f"  node limit: none (mode {limit['mode']})")
    else:
        console.print(
            f"  node limit: {limit['limit']}, headroom {limit['headroom']}, excess {limit['excess']} "
            f"(mode {limit['mode']})"
        )
    for error in report["errors"]:
        console.print(f"  [red]error[/red]: {error} (every reason fails closed to 0)")


def print_calendar(console: Console, report: dict[str, Any]) -> None:
    local = report["timeZone"]
    table = Table(
        title=f"NodePool {report['nodepool']}: budget calendar {report['from']} .. {report['to']} "
        f"(nodes {report['nodes']}, local zone {local})",
        title_justify="left",
    )
    for column in ("reason", "start (UTC)", "end (UTC)", f"start ({local})", f"end ({local})", "allowed"):
        table.add_column(column)
    for w in report["windows"]:
        table.add_row(w["reason"], w["start"], w["end"], w["startLocal"][:16], w["endLocal"][:16], _shown(w["allowed"]))
    console.print(table)
    for error in report["errors"]:
        console.print(f"  [red]error[/red]: {error}")
