"""Disruption budgets, exactly as upstream Karpenter computes them (upstream's
`GetAllowedDisruptionsByReason`, `pkg/apis/v1/nodepool.go`).

- A budget without a schedule is always active; a scheduled one is active in [hit, hit+duration).
- An active budget allows its `nodes`: an integer as is (not capped by the node count), a
  percentage of the counted nodes rounded up. An inactive one allows any number (None here).
- Per reason, the most restrictive active budget that names the reason (or names none) wins.
- Any budget that fails to evaluate fails the whole pool closed: 0 for every reason.
- remaining = max(allowed - disrupting, 0).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.api.cron import CronError, parse_cron
from shared.api.duration import parse_duration
from shared.api.nodepool import Budget, DisruptionReason, NodePool
from shared.policy.schedule import UTC_KEY, CompiledSchedule, epoch

REASONS: tuple[DisruptionReason, ...] = (
    DisruptionReason.EMPTY,
    DisruptionReason.UNDERUTILIZED,
    DisruptionReason.DRIFTED,
)


class BudgetError(ValueError):
    """A budget that cannot be evaluated; the pool then allows no disruption at all."""


@dataclass(frozen=True, slots=True)
class CompiledBudget:
    index: int
    nodes: str
    reasons: frozenset[DisruptionReason] | None
    schedule: CompiledSchedule | None
    schedule_error: str | None
    percent: int | None = None  # `nodes` parsed once: a percentage, or
    count: int | None = None  # a plain count; neither when it does not parse
    applies: tuple[bool, ...] = (True,) * 3  # applies_to for each of REASONS, in order

    def value(self, num_nodes: int) -> int:
        """The number this budget allows while active (upstream's scaled IntOrString, rounded up)."""
        if self.count is not None:
            return self.count
        if self.percent is not None:
            return -(-self.percent * num_nodes // 100)
        raise BudgetError(
            f"budget {self.index}: invalid nodes value {self.nodes!r}: expected an integer or a percentage"
        )

    def allowed(self, t: float, num_nodes: int) -> int | None:
        if self.schedule_error is not None:
            raise BudgetError(self.schedule_error)
        if self.schedule is not None and not self.schedule.is_active(t):
            return None
        return self.value(num_nodes)


@functools.lru_cache(maxsize=4096)
def compile_budget(
    index: int,
    nodes: str,
    reasons: tuple[DisruptionReason, ...] | None,
    schedule: str | None,
    duration: str | None,
    time_zone: str | None,
) -> CompiledBudget:
    error = None
    compiled = None
    if schedule is not None or duration is not None:
        try:
            cron = parse_cron(schedule or "")
            span = parse_duration(duration) if duration is not None else parse_duration("0s")
            compiled = CompiledSchedule(cron, span, time_zone or UTC_KEY)
        except (CronError, ValueError) as exc:
            error = f"budget {index}: invalid cron {schedule!r}: {exc}"
        except LookupError as exc:
            error = f"budget {index}: unknown time zone {time_zone!r}: {exc}"
    percent = count = None
    text = nodes.strip()
    try:
        if text.endswith("%"):
            percent = int(text[:-1])
        else:
            count = int(text)
    except ValueError:
        pass  # reported by value() only while the budget is active, as upstream does
    matched = None if reasons is None else frozenset(reasons)
    applies = tuple(matched is None or r in matched for r in REASONS)
    return CompiledBudget(index, nodes, matched, compiled, error, percent, count, applies)


def compile_budgets(budgets: Sequence[Budget]) -> tuple[CompiledBudget, ...]:
    return tuple(
        compile_budget(
            i,
            b.nodes,
            None if b.reasons is None else tuple(b.reasons),
            b.schedule,
            b.duration,
            b.time_zone,
        )
        for i, b in enumerate(budgets)
    )


@dataclass(frozen=True, slots=True)
class ReasonBudget:
    reason: DisruptionReason
    allowed: int | None
    remaining: int | None


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """Allowed and remaining disruptions per reason at one instant; None means unbounded."""

    nodes: int
    disrupting: int
    reasons: dict[DisruptionReason, ReasonBudget]
    errors: tuple[str, ...]

    def allowed(self, reason: DisruptionReason) -> int | None:
        return self.reasons[reason].allowed

    def remaining(self, reason: DisruptionReason) -> int | None:
        return self.reasons[reason].remaining


def remaining(allowed: int | None, disrupting: int) -> int | None:
    return None if allowed is None else max(allowed - disrupting, 0)


class DisruptionBudgets:
    """A pool's budgets, compiled once and evaluated at any instant."""

    __slots__ = ("budgets",)

    def __init__(self, budgets: Sequence[Budget]) -> None:
        self.budgets = compile_budgets(budgets)

    @classmethod
    def of(cls, nodepool: NodePool) -> DisruptionBudgets:
        return cls(nodepool.spec.disruption.budgets)

    def status(self, at: datetime | float, nodes: int, disrupting: int = 0) -> BudgetStatus:
        t = at if isinstance(at, float | int) else epoch(at)
        lowest: list[int | None] = [None] * len(REASONS)
        errors: list[str] = []
        for budget in self.budgets:
            try:
                value = budget.allowed(t, nodes)
            except BudgetError as exc:
                errors.append(str(exc))
                continue
            if value is None:
                continue
            for i, applies in enumerate(budget.applies):
                if applies and (lowest[i] is None or value < lowest[i]):
                    lowest[i] = value
        if errors:
            lowest = [0] * len(REASONS)
        per_reason = {
            reason: ReasonBudget(reason, allowed, remaining(allowed, disrupting))
            for reason, allowed in zip(REASONS, lowest, strict=True)
        }
        return BudgetStatus(nodes, disrupting, per_reason, tuple(errors))


@dataclass(frozen=True, slots=True)
class BudgetNode:
    """What budget counting needs to know about one node of a pool (BuildDisruptionBudgetMapping)."""

    managed: bool = True
    initialized: bool = True
    instance_terminating: bool = False
    ready: bool = True
    marked_for_deletion: bool = False


def budget_counts(nodes: Iterable[BudgetNode]) -> tuple[int, int]:
    """(nodes that count, of which disrupting). Managed, initialized and not instance-terminating
    nodes count, deleting ones included; a counted node disrupts while NotReady or marked."""
    counted = disrupting = 0
    for node in nodes:
        if not node.managed or not node.initialized or node.instance_terminating:
            continue
        counted += 1
        if not node.ready or node.marked_for_deletion:
            disrupting += 1
    return counted, disrupting


def blocked_by_budget_message(reason: DisruptionReason) -> str:
    """Upstream's DisruptionBlocked event text on the NodePool."""
    return f"No allowed disruptions for disruption reason {reason} due to blocking budget"
