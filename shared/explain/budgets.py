"""Which of a pool's budgets set a reason's allowance at an instant, and the scheduled window
each is in (start and end, in UTC and in the budget's own time zone): what a budget at 0 needs
to be told with. The allowance itself is `shared.policy.budgets`' (the most restrictive active
budget wins); this only names the budgets that gave it."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from shared.api.nodepool import DisruptionReason, NodePool
from shared.explain.model import Budget, Window
from shared.policy.budgets import REASONS, BudgetError, DisruptionBudgets
from shared.policy.schedule import UTC_KEY, epoch


def budget_at(pool: NodePool, reason: DisruptionReason, at: datetime, nodes: int, disrupting: int) -> Budget:
    """The reason's allowance in the pool at `at` and the budgets that set it."""
    budgets = DisruptionBudgets.of(pool)
    status = budgets.status(at, nodes, disrupting)
    allowed = status.allowed(reason)
    t = epoch(at)
    index = REASONS.index(reason)
    windows = []
    for spec, compiled in zip(pool.spec.disruption.budgets, budgets.budgets, strict=True):
        try:
            value = compiled.allowed(t, nodes)
        except BudgetError:
            continue  # said in `errors`: every reason is at 0
        if value is None or not compiled.applies[index] or value != allowed:
            continue
        zone = spec.time_zone or UTC_KEY
        window = Window(
            budget=compiled.index,
            nodes=spec.nodes,
            reasons=None if spec.reasons is None else [str(r) for r in spec.reasons],
            schedule=spec.schedule,
            duration=spec.duration,
            time_zone=zone,
        )
        if compiled.schedule is not None:
            span = compiled.schedule.duration
            held = [(a, b) for a, b in compiled.schedule.windows(t - span, t + span) if a <= t < b]
            if held:
                start, end = (datetime.fromtimestamp(x, UTC) for x in held[0])
                local = ZoneInfo(zone) if zone != UTC_KEY else UTC
                window = window.model_copy(
                    update={
                        "start": start,
                        "end": end,
                        "start_local": start.astimezone(local).isoformat(),
                        "end_local": end.astimezone(local).isoformat(),
                    }
                )
        windows.append(window)
    return Budget(
        reason=str(reason),
        allowed=allowed,
        remaining=status.remaining(reason),
        nodes=nodes,
        disrupting=disrupting,
        windows=windows,
        errors=list(status.errors),
    )


def told(budget: Budget) -> str:
    """The budget at 0 in words: which budget, its schedule and time zone, its window."""
    if budget.errors:
        return f"a budget fails to evaluate, so every reason is at 0: {'; '.join(budget.errors)}"
    parts = []
    for w in budget.windows:
        text = f"budget {w.budget} (nodes {w.nodes!r}"
        if w.reasons is not None:
            text += f", reasons {', '.join(w.reasons)}"
        if w.schedule is not None:
            text += f", schedule {w.schedule!r} for {w.duration} in {w.time_zone}"
        text += ")"
        if w.start is not None and w.end is not None:
            text += f" is active from {w.start_local} to {w.end_local}"
            if w.time_zone != UTC_KEY:
                text += f" ({_utc(w.start)} to {_utc(w.end)} UTC)"
        parts.append(text)
    said = "; ".join(parts) or "no budget names it"
    return (
        f"{budget.reason} allows {budget.allowed}, {budget.disrupting} of {budget.nodes} node(s) already "
        f"disrupting, {budget.remaining} left: {said}"
    )


def _utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
