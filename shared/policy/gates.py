"""Whether a disruption may start now: budgets and the node limit together.

Upstream distinguishes the two blocking causes in its `DisruptionBlocked` events, and so do we.
Forceful disruption (expiration) passes both gates, as upstream does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.api.nodepool import DisruptionReason
from shared.policy.budgets import BudgetStatus, blocked_by_budget_message
from shared.policy.limits import NodeLimit, blocked_by_node_limit_message


class BlockCause(StrEnum):
    BUDGET = "budget"
    NODE_HARD_LIMIT = "node-hard-limit"


@dataclass(frozen=True, slots=True)
class GateResult:
    allowed: bool
    cause: BlockCause | None = None
    message: str | None = None


ALLOWED = GateResult(True)


def check_disruption(
    reason: DisruptionReason,
    budgets: BudgetStatus,
    node_limit: NodeLimit,
    *,
    candidates: int = 1,
    replacements: int = 0,
    forceful: bool = False,
) -> GateResult:
    """May `candidates` nodes be disrupted for `reason`, launching `replacements` new ones first?"""
    if forceful:
        return ALLOWED
    left = budgets.remaining(reason)
    if left is not None and left < candidates:
        return GateResult(False, BlockCause.BUDGET, blocked_by_budget_message(reason))
    if node_limit.blocks_replacements(replacements):
        return GateResult(False, BlockCause.NODE_HARD_LIMIT, blocked_by_node_limit_message(reason))
    return ALLOWED
