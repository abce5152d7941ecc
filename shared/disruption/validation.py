"""Before a graceful command is carried out (upstream's `pkg/controllers/disruption/validation.go`),
and beyond upstream: a command is refused when anything about a candidate changed since the
decision.

Upstream waits 15 s, then checks the candidates again. nodewright also keeps, with the decision,
the log position it saw, and refuses the command if any event about a candidate came after it
(a pod bound to it, a pod event, a deletion): a decision is never carried out on inputs it did
not see (upstream #3185). Emptiness keeps the subset still valid; consolidation
and drift are all or nothing. A command whose replacements are not all Initialized in time is
cancelled (`command_timeout`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

VALIDATION_DELAY = timedelta(seconds=15)
REJECTED = "ConsolidationRejected"


def command_timeout(queued: int) -> timedelta:
    """How long a command may wait for its replacements: 80 ms per command queued, at least ten
    minutes and at most an hour (upstream's clamp)."""
    return min(max(timedelta(milliseconds=80 * queued), timedelta(minutes=10)), timedelta(hours=1))


@dataclass(frozen=True, slots=True)
class Verdict:
    keep: tuple[str, ...]
    """The candidates the command still carries out (empty: it is cancelled)."""
    rejected: Mapping[str, str]
    """Candidate -> why it was dropped (upstream's `ConsolidationRejected` reasons, and ours)."""

    @property
    def cancelled(self) -> bool:
        return not self.keep


def validate(
    candidates: Sequence[str],
    *,
    moved: Collection[str],
    still_valid: Collection[str],
    within_budget: Collection[str],
    nominated: Collection[str] = (),
    partial: bool = False,
) -> Verdict:
    """`moved`: the candidates whose stream moved after the log position the decision saw;
    `still_valid`: those that are still candidates (and, for emptiness, still empty and Consolidatable);
    `within_budget`: those the budget still allows; `partial`: keep whatever subset survives
    (emptiness) instead of all or nothing."""
    rejected: dict[str, str] = {}
    for name in candidates:
        if name in moved:
            rejected[name] = "changed since the decision: its stream moved"
        elif name not in still_valid:
            rejected[name] = "churn"
        elif name in nominated:
            rejected[name] = "nominated for a pending pod"
        elif name not in within_budget:
            rejected[name] = "budget"
    if rejected and not partial:
        return Verdict((), rejected)
    return Verdict(tuple(n for n in candidates if n not in rejected), rejected)
