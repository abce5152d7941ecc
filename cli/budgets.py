"""`nodewright budgets`: allowed disruptions at an instant, or the budget calendar over a span."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.table import Table

from shared.api.instants import iso, out_of_range
from shared.api.nodepool import NodePool
from shared.policy.budgets import BudgetStatus, DisruptionBudgets
from shared.policy.calendar import BudgetCalendar, CalendarTooLarge, budget_calendar
from shared.policy.limits import NodeLimit


class UsageError(ValueError):
    """Bad arguments; the command exits 2."""


CALENDAR_SETTING = "NODEWRIGHT_MAX_CALENDAR_DAYS"
WINDOWS_SETTING = "NODEWRIGHT_MAX_CALENDAR_WINDOWS"


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
    if (problem := out_of_range(value)) is not None:
        raise UsageError(f"{option}: {text!r} is {problem}")
    return value


def calendar_span(start: datetime, end: datetime, max_days: int) -> None:
    """A calendar lists every budget change: over centuries it would never end."""
    if end <= start:
        raise UsageError("--to must be after --from")
    if end - start > timedelta(days=max_days):
        raise UsageError(
            f"--from/--to: {(end - start).days} days: a calendar spans at most {max_days} days "
            f"(set {CALENDAR_SETTING} for longer ones)"
        )


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


def calendar_reports(
    pools: list[NodePool], start: datetime, end: datetime, nodes: int, max_windows: int
) -> list[dict[str, Any]]:
    """Each pool's calendar, all of them together within `max_windows` windows: UsageError,
    before the windows are built, naming the setting and what to narrow."""
    reports = []
    left = max_windows
    for pool in pools:
        try:
            report = calendar_report(pool, start, end, nodes, left)
        except CalendarTooLarge as exc:
            raise UsageError(
                f"--from/--to: the budget calendar of NodePool {pool.name} from {iso(start)} to {iso(end)} is "
                f"too large to list ({exc}): a calendar lists at most {WINDOWS_SETTING}={max_windows:,} windows, "
                f"all NodePools and reasons together; narrow --from/--to or choose one --nodepool"
            ) from None
        left -= len(report["windows"])
        reports.append(report)
    return reports


def calendar_report(
    pool: NodePool, start: datetime, end: datetime, nodes: int, max_windows: int | None = None
) -> dict[str, Any]:
    calendar: BudgetCalendar = budget_calendar(DisruptionBudgets.of(pool), start, end, nodes, max_windows)
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
    """Plain aligned columns, not a rich Table: a five-year calendar has thousands of windows,
    which rich takes seconds to lay out; this takes milliseconds."""
    local = report["timeZone"]
    console.print(
        f"NodePool {report['nodepool']}: budget calendar {report['from']} .. {report['to']} "
        f"(nodes {report['nodes']}, local zone {local})",
        markup=False,
        highlight=False,
    )
    header = ("reason", "start (UTC)", "end (UTC)", f"start ({local})", f"end ({local})", "allowed")
    rows = [
        (w["reason"], w["start"], w["end"], w["startLocal"][:16], w["endLocal"][:16], _shown(w["allowed"]))
        for w in report["windows"]
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    rule = tuple("-" * width for width in widths)
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, rule, *rows]
    ]
    console.out("\n".join(lines), highlight=False)
    for error in report["errors"]:
        console.print(f"  [red]error[/red]: {error}")
