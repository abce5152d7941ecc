"""What the counters' rules answer: a rule's name and a violation (as `nodewright audit` reports
them), and the errors a strict append raises when a rule would break."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class Rule:
    """Rule names, as `nodewright audit` reports them."""

    LIMITS = "limits"
    BUDGET = "budget"
    NODE_HARD_LIMIT = "node-hard-limit"
    CAPACITY = "capacity"
    NODEPOOL = "nodepool"
    LIFECYCLE = "lifecycle"
    PAYLOAD = "payload"
    FORCEFUL = "forceful"
    EXPIRED = "expired"
    OVER_LIMIT = "over-limit"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    detail: str
    numbers: dict[str, Any] = field(default_factory=dict)


class ReservationError(Exception):
    """A counted event that breaks a rule; the store appends nothing and raises this."""

    def __init__(self, violation: Violation, nodepool: str = "") -> None:
        super().__init__(violation.detail)
        self.violation = violation
        self.nodepool = nodepool

    @property
    def rule(self) -> str:
        return self.violation.rule

    @property
    def numbers(self) -> dict[str, Any]:
        return self.violation.numbers


class LimitExceeded(ReservationError):
    pass


class BudgetExceeded(ReservationError):
    pass


class NodeLimitExceeded(ReservationError):
    pass


class InvalidTransition(ReservationError):
    pass
