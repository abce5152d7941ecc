"""Multi-node consolidation (upstream's `pkg/controllers/disruption/multinodeconsolidation.go`): up
to 100 candidates of one pool within its budget, cheapest to disrupt first; by binary search, the
longest prefix of at least two that yields a command (its replacement also filtered by
`filterOutSameInstanceType`). The method the graceful pass asks after Drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from shared.disruption.candidates import Candidate
from shared.disruption.consolidation import (
    REASON,
    Consolidation,
    Replaceable,
    any_replacement,
    evaluate,
    movable,
    movables,
    savings,
)
from shared.disruption.method import GRACEFUL, Found, Outcome, Round
from shared.disruption.simulation import ClusterView, Movable

MULTI_NODE_MOST = 100


def multi_node(
    candidates: Sequence[Movable],
    cluster: ClusterView,
    remaining: Mapping[str, int | None],
    *,
    spot_to_spot: bool,
    replaceable: Replaceable = any_replacement,
) -> Consolidation:
    """The longest prefix (two or more, at most 100) of the candidates their budgets allow that
    yields a command, found by binary search as upstream does."""
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
        attempt = evaluate(allowed[: middle + 1], cluster, spot_to_spot=spot_to_spot, multi=True)
        if attempt.command is not None and attempt.command.replacements:
            pools = {m.nodepool for m in allowed[: middle + 1]}
            if not all(replaceable(pool, 1) for pool in pools):
                limited.update(pools)
                attempt = Consolidation(None, why_not="a replacement would exceed the node hard limit")
        if attempt.command is not None:
            best, low = attempt, middle + 1
        else:
            if best.command is None:
                best = attempt
            high = middle - 1
    return replace(best, limited=tuple(sorted(limited)))


class MultiNodeConsolidation:
    """The method: the candidates of each pool together, pool by pool in the order
    of their cheapest candidate; the first pool that yields a command wins."""

    reason = REASON
    disruption_class = GRACEFUL
    consolidation_type = "multi"

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        return movable(round_, candidate)

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        moves = movables(round_, chosen)
        world = round_.world
        limited: list[str] = []
        for pool in dict.fromkeys(m.nodepool for m in moves):
            multi = multi_node(
                [m for m in moves if m.nodepool == pool],
                round_.cluster,
                budgets,
                spot_to_spot=world.spot_to_spot,
                replaceable=round_.replaceable,
            )
            limited += multi.limited
            if multi.command is not None:
                claims = (multi.planned,) if multi.planned is not None else ()
                found = Found(
                    multi.command, pool, self.consolidation_type, savings(multi.command, moves, multi.planned), claims
                )
                return Outcome((found,), limited=tuple(limited))
        return Outcome(limited=tuple(limited))
