"""What a disruption method decides: a command to delete some candidates, or to replace them with
new NodeClaims first. The service turns it into `DisruptionDecided` through `reserve_disruption`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Decision(StrEnum):
    DELETE = "delete"
    REPLACE = "replace"


@dataclass(frozen=True, slots=True)
class Command:
    reason: str
    """A budget reason (Empty, Underutilized, Drifted), or a forceful one (Expired, OverLimit)."""
    candidates: tuple[str, ...]
    """NodeClaim names, in the order the method chose them."""
    replacements: int = 0
    """NodeClaims to launch (and see Initialized) before the candidates go."""

    @property
    def decision(self) -> Decision:
        return Decision.REPLACE if self.replacements else Decision.DELETE
