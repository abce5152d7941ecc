"""Multi-node consolidation (upstream's `pkg/controllers/disruption/multinodeconsolidation.go`): up
to 100 candidates of any pools, each within its own pool's budget, cheapest to disrupt first; by
binary search, the longest prefix of at least two that yields a command (its replacement also
filtered by `filterOutSameInstanceType`, and each Balanced pool's share of it scored). The method
the graceful pass asks after Drift.

A command whose candidates span pools is recorded as one decision per pool, appended in one
transaction (each charged to its own pool's budget), and carried out as one (docs/disruption.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from shared.disruption.balanced import PoolTotals
from shared.disruption.candidates import Candidate
from shared.disruption.consolidation import (
    NO_BALANCED,
    REASON,
    Consolidation,
    Replaceable,
    any_replacement,
    evaluate,
    found,
    movable,
    movables,
    refused,
)
from shared.disruption.method import GRACEFUL, Outcome, Round
from shared.disruption.simulation import ClusterView, Movable

MULTI_NODE_MOST = 100


def multi_node(
    candidates: Sequence[Movable],
    cluster: ClusterView,
    remaining: Mapping[str, int | None],
    *,
    spot_to_spot: bool,
    replaceable: Replaceable = any_replacement,
    balanced: Mapping[str, PoolTotals] = NO_BALANCED,
) -> Consolidation:
    """The longest prefix (two or more, at most 100) of the candidates their budgets allow that
    yields a command, found by binary search as upstream does; a prefix Balanced refuses yields
    none."""
    left = dict(remaining)
    allowed: list[Movable] = []
    for candidate in candidates:
        budget = left.get(candidate.nodepool, 0)
        if budget is not None and budget <= 0:
            continue
        allowed.append(candidate)
        if budget is not None:
            left[candidate.nodepool] = budget - 1
        if len(allowed) == MULTI_NODE_MOST:
            break
    best = Consolidation(None)
    limited: set[str] = set()
    cluster = cluster.prepared()
    low, high = 1, len(allowed) - 1  # prefix lengths low + 1 ... high + 1
    while low <= high:
        middle = (low + high) // 2
        attempt = evaluate(allowed[: middle + 1], cluster, spot_to_spot=spot_to_spot, multi=True, balanced=balanced)
        if attempt.command is not None and attempt.planned is not None:
            full = refused((attempt.planned,), replaceable)
            if full:
                limited.update(full)
                attempt = Consolidation(None, why_not="a replacement would exceed the node hard limit")
        if attempt.command is not None:
            best, low = attempt, middle + 1
        else:
            if best.command is None:
                best = attempt
            high = middle - 1
    return replace(best, limited=tuple(sorted(limited)))


class MultiNodeConsolidation:
    """The method: the candidates of every pool together, cheapest to disrupt first, as upstream's
    (a command may take nodes of several pools, and its replacement goes wherever it fits)."""

    reason = REASON
    disruption_class = GRACEFUL
    consolidation_type = "multi"

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        return movable(round_, candidate)

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        moves = movables(round_, chosen)
        multi = multi_node(
            moves,
            round_.cluster,
            budgets,
            spot_to_spot=round_.world.spot_to_spot,
            replaceable=round_.replaceable,
            balanced=round_.balanced,
        )
        if multi.command is None:
            return Outcome(limited=multi.limited)
        command = found(round_, self.consolidation_type, moves, multi.command, multi.planned, multi.scores)
        return Outcome((command,), limited=multi.limited)
