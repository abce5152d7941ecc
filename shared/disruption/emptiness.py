"""Emptiness (upstream's `pkg/controllers/disruption/emptiness.go`, reason Empty): every empty,
Consolidatable candidate that its pool's budget still allows goes, all in one delete command. A pool
whose consolidateAfter is Never is never emptied (`Unconsolidatable`); a pool with empty candidates
and no budget left says so on the NodePool (`DisruptionBlocked`), once per pass. `Emptiness` is
the method (`method.Method`) the graceful pass asks first."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Candidate
from shared.disruption.command import Command
from shared.disruption.consolidatable import disabled_message
from shared.disruption.method import GRACEFUL, Found, Outcome, Round
from shared.policy.budgets import blocked_by_budget_message

REASON = DisruptionReason.EMPTY


@dataclass(frozen=True, slots=True)
class EmptinessDecision:
    command: Command | None
    budget_blocked: tuple[str, ...] = ()
    """Pools with empty candidates their budget did not allow: upstream's message on each."""
    unconsolidatable: Mapping[str, str] = field(default_factory=dict)
    """NodeClaim -> `Unconsolidatable` message, for empty nodes of pools with consolidation off."""

    @staticmethod
    def budget_message() -> str:
        return blocked_by_budget_message(REASON)


def emptiness(
    candidates: Sequence[Candidate],
    *,
    remaining: Mapping[str, int | None],
    disabled: Callable[[str], bool],
    consolidatable: Callable[[Candidate], bool],
) -> EmptinessDecision:
    """`remaining`: each pool's Empty budget left now (None: unbounded; a pool not listed has
    none); `disabled(pool)`: its consolidateAfter is Never; `consolidatable(candidate)`: its
    consolidateAfter has passed since its last pod event."""
    left = dict(remaining)
    chosen: list[str] = []
    blocked: list[str] = []
    off: dict[str, str] = {}
    for c in candidates:
        if not c.empty:
            continue
        if disabled(c.nodepool):
            off[c.nodeclaim] = disabled_message(c.nodepool)
            continue
        if not consolidatable(c):
            continue
        budget = left.get(c.nodepool, 0)
        if budget is not None and budget <= 0:
            if c.nodepool not in blocked:
                blocked.append(c.nodepool)
            continue
        chosen.append(c.nodeclaim)
        if budget is not None:
            left[c.nodepool] = budget - 1
    command = Command(REASON, tuple(chosen)) if chosen else None
    return EmptinessDecision(command, tuple(blocked), off)


class Emptiness:
    """The method: every empty, Consolidatable candidate its pool's budget allows, cheapest to
    disrupt first, in one delete command per pool."""

    reason = REASON
    disruption_class = GRACEFUL
    consolidation_type = "empty"

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        return candidate.empty and round_.consolidatable(candidate)

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        pools = round_.world.pools
        decided = emptiness(
            round_.cheapest_first(chosen),
            remaining=budgets,
            disabled=lambda pool: pools[pool].consolidate_after is None,
            consolidatable=round_.consolidatable,
        )
        if decided.command is None:
            return Outcome()
        names = decided.command.candidates
        found = []
        for pool in dict.fromkeys(round_.nodes[name].state.nodepool for name in names):
            mine = tuple(name for name in names if round_.nodes[name].state.nodepool == pool)
            found.append(Found(Command(decided.command.reason, mine), pool, self.consolidation_type))
        return Outcome(tuple(found))
