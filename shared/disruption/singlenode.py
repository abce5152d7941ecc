"""Single-node consolidation (upstream's `pkg/controllers/disruption/singlenodeconsolidation.go`):
the candidates one at a time, cheapest to disrupt first; the first that yields a command wins.
The method the graceful pass asks last. A candidate of a Balanced pool whose best case (deleting it
outright) would not score enough is kept without a simulation, as upstream skips it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from shared.disruption.balanced import PoolTotals, best_case
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


def single_node(
    candidates: Sequence[Movable],
    cluster: ClusterView,
    remaining: Mapping[str, int | None],
    *,
    spot_to_spot: bool,
    replaceable: Replaceable = any_replacement,
    balanced: Mapping[str, PoolTotals] = NO_BALANCED,
) -> Consolidation:
    """The first candidate, in order, whose pool's budget allows one more and that yields a
    command the node limit of its replacement's pool (and Balanced, for its pool) lets through."""
    last = Consolidation(None)
    limited: list[str] = []
    kept: dict[str, str] = {}  # each candidate looked at and kept: why (upstream's Unconsolidatable)
    cluster = cluster.prepared()
    for candidate in candidates:
        budget = remaining.get(candidate.nodepool, 0)
        if budget is not None and budget <= 0:
            continue
        best = best_case(candidate, balanced)
        if best is not None and not best.approved:
            why = f'NodePool "{candidate.nodepool}" is Balanced and even a delete would not do: {best.describe()}'
            last = Consolidation(None, why_not=why, scores={candidate.nodepool: best})
            kept[candidate.nodeclaim] = why
            continue
        last = evaluate([candidate], cluster, spot_to_spot=spot_to_spot, multi=False, balanced=balanced)
        command = last.command
        full = refused((last.planned,), replaceable) if command is not None and last.planned is not None else []
        if full:  # the pool's node hard limit: said on the pool (DisruptionBlocked), not on the node
            limited += [pool for pool in full if pool not in limited]
            last = Consolidation(None, why_not="a replacement would exceed the node hard limit")
            continue
        if command is not None:
            return replace(last, limited=tuple(limited), unconsolidatable=kept)
        if last.why_not:
            kept[candidate.nodeclaim] = last.why_not
    return Consolidation(None, why_not=last.why_not, limited=tuple(limited), unconsolidatable=kept)


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
            moves,
            round_.cluster,
            budgets,
            spot_to_spot=world.spot_to_spot,
            replaceable=round_.replaceable,
            balanced=round_.balanced,
        )
        if single.command is None:
            return Outcome(limited=single.limited, unconsolidatable=single.unconsolidatable)
        command = found(round_, self.consolidation_type, moves, single.command, single.planned, single.scores)
        return Outcome((command,), limited=single.limited, unconsolidatable=single.unconsolidatable)
