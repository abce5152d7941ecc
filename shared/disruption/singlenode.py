"""Single-node consolidation (upstream's `pkg/controllers/disruption/singlenodeconsolidation.go`):
the candidates one at a time, cheapest to disrupt first; the first that yields a command wins.
The method the graceful pass asks last.
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


def single_node(
    candidates: Sequence[Movable],
    cluster: ClusterView,
    remaining: Mapping[str, int | None],
    *,
    spot_to_spot: bool,
    replaceable: Replaceable = any_replacement,
) -> Consolidation:
    """The first candidate, in order, whose pool's budget allows one more and that yields a
    command its pool's node limit lets through."""
    last = Consolidation(None)
    limited: list[str] = []
    cluster = cluster.prepared()
    for candidate in candidates:
        budget = remaining.get(candidate.nodepool, 0)
        if budget is not None and budget <= 0:
            continue
        last = evaluate([candidate], cluster, spot_to_spot=spot_to_spot, multi=False)
        command = last.command
        if command is not None and command.replacements and not replaceable(candidate.nodepool, 1):
            if candidate.nodepool not in limited:
                limited.append(candidate.nodepool)
            last = Consolidation(None, why_not="a replacement would exceed the node hard limit")
            continue
        if command is not None:
            return replace(last, limited=tuple(limited))
    return Consolidation(None, why_not=last.why_not, limited=tuple(limited))


class SingleNodeConsolidation:
    """The method: each candidate alone, across every pool."""

    reason = REASON
    disruption_class = GRACEFUL
    consolidation_type = "single"

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        return movable(round_, candidate)

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        moves = movables(round_, chosen)
        world = round_.world
        single = single_node(
            moves, round_.cluster, budgets, spot_to_spot=world.spot_to_spot, replaceable=round_.replaceable
        )
        if single.command is None:
            return Outcome(limited=single.limited)
        pool = round_.nodes[single.command.candidates[0]].state.nodepool
        claims = (single.planned,) if single.planned is not None else ()
        found = Found(
            single.command, pool, self.consolidation_type, savings(single.command, moves, single.planned), claims
        )
        return Outcome((found,), limited=single.limited)
