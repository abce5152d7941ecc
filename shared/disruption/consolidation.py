"""Consolidation (upstream's `pkg/controllers/disruption/consolidation.go`, reason Underutilized):
remove nodes whose pods fit elsewhere, or replace them with one strictly cheaper node. What the
two methods share: `evaluate` judges a set of candidates; `singlenode` and `multinode` choose
which sets to judge.

A simulation's outcome: a candidate pod that fits nowhere, or a plan that leans on a node not yet
initialized, is no command; no new claim is a delete; exactly one is a replace, kept to the
cheaper types (`pricing`); more than one is no command. The replacement goes in whichever pool
the simulation put it, as upstream's: the simulation leaves each pool what its limits leave
(`simulation.room`), and the store reserves it there (`limits.nodes` included) when it is created.
A multi-node replacement is also filtered by `filterOutSameInstanceType`. A move of a Balanced
pool must also score at least 1/k for what it saves against what it disrupts (`balanced`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from shared.api.nodepool import DisruptionReason
from shared.disruption.balanced import PoolTotals, Score, judge
from shared.disruption.candidates import Candidate
from shared.disruption.command import Command
from shared.disruption.method import Found, Round
from shared.disruption.pricing import Replacement, cheaper, filter_out_same_instance_type, pinned, replacement
from shared.disruption.simulation import ClusterView, Movable, simulate
from shared.scheduling.values import PlannedClaim

REASON = DisruptionReason.UNDERUTILIZED
Replaceable = Callable[[str, int], bool]
"""Whether a pool's node hard limit lets `n` replacements launch before its candidates go."""


def any_replacement(nodepool: str, count: int) -> bool:
    return True


def refused(claims: Sequence[PlannedClaim], replaceable: Replaceable) -> list[str]:
    """The pools whose node hard limit refuses the replacements planned into them."""
    counts = Counter(c.nodepool for c in claims)
    return [pool for pool, n in sorted(counts.items()) if not replaceable(pool, n)]


@dataclass(frozen=True, slots=True)
class Consolidation:
    command: Command | None
    replacement: Replacement | None = None
    why_not: str | None = None
    """Why the last candidates looked at yielded nothing (upstream's `Unconsolidatable` words)."""
    limited: tuple[str, ...] = ()
    """Pools whose node hard limit refused a replacement this method found."""
    planned: PlannedClaim | None = None
    """The replacement as the simulation planned it (its pods, requirements and options)."""
    unconsolidatable: Mapping[str, str] = field(default_factory=dict)
    """Single-node's candidates it looked at and kept, each with why (`Unconsolidatable`)."""
    scores: Mapping[str, Score] = field(default_factory=dict)
    """Per Balanced pool of its candidates, the move's score (`balanced`): the command's, or the
    refused move's."""


NO_BALANCED: Mapping[str, PoolTotals] = MappingProxyType({})
"""No pool is Balanced: nothing is scored."""


def evaluate(
    chosen: Sequence[Movable],
    cluster: ClusterView,
    *,
    spot_to_spot: bool,
    multi: bool,
    balanced: Mapping[str, PoolTotals] = NO_BALANCED,
) -> Consolidation:
    """The command consolidating exactly these candidates, or why there is none. `balanced`: the
    totals of the Balanced pools, whose moves are scored (none: nothing is)."""
    simulation = simulate([m.move for m in chosen], cluster)
    if not simulation.valid:
        return Consolidation(None, why_not=simulation.why_not())
    names = tuple(m.nodeclaim for m in chosen)
    claims = simulation.new_claims
    if not claims:
        return _scored(Consolidation(Command(REASON, names)), chosen, balanced)
    if len(claims) > 1:
        return Consolidation(None, why_not=f"Can't remove without creating {len(claims)} candidates")
    options = cheaper(claims[0].options, sum(m.price for m in chosen))
    if multi:
        options = filter_out_same_instance_type(options, {m.instance_type for m in chosen})
    capacity_types = {m.capacity_type for m in chosen}
    chosen_replacement = replacement(options, capacity_types, spot_to_spot=spot_to_spot, multi=multi)
    if isinstance(chosen_replacement, str):
        return Consolidation(None, why_not=chosen_replacement)
    planned = pinned(claims[0], chosen_replacement)
    found = Consolidation(Command(REASON, names, replacements=1), chosen_replacement, planned=planned)
    return _scored(found, chosen, balanced)


def _scored(found: Consolidation, chosen: Sequence[Movable], balanced: Mapping[str, PoolTotals]) -> Consolidation:
    """The command as Balanced judges it: kept with its scores, or refused with them."""
    if not balanced or found.command is None:
        return found
    saved = sum(m.price for m in chosen) - _replacement_price(found.planned)
    verdict = judge(chosen, saved, balanced)
    if verdict.approved:
        return replace(found, scores=verdict.scores)
    return Consolidation(None, why_not=verdict.why_not(found.command.decision.value), scores=verdict.scores)


def _replacement_price(planned: PlannedClaim | None) -> float:
    """What the replacement costs an hour at best (its cheapest type's cheapest offer)."""
    return min((o.price for o in planned.options), default=0.0) if planned is not None else 0.0


def savings(command: Command, moves: Sequence[Movable], planned: PlannedClaim | None) -> float:
    """What the command saves an hour: the candidates' prices less the cheapest replacement's."""
    prices = {m.nodeclaim: m.price for m in moves}
    before = sum(prices[c] for c in command.candidates)
    return round(before - _replacement_price(planned), 6)


def found(
    round_: Round,
    consolidation_type: str,
    moves: Sequence[Movable],
    command: Command,
    planned: PlannedClaim | None,
    scores: Mapping[str, Score],
) -> Found:
    """A consolidation command as the pass takes it: under its first candidate's pool (the
    command's first part), with what it saves and its replacement, if any."""
    pool = round_.nodes[command.candidates[0]].state.nodepool
    claims = (planned,) if planned is not None else ()
    return Found(command, pool, consolidation_type, savings(command, moves, planned), claims, scores=scores)


def movable(round_: Round, candidate: Candidate) -> bool:
    """Which candidates consolidation would disrupt (upstream's `ShouldDisrupt` for both methods):
    not empty (Emptiness takes those), Consolidatable, of a pool whose policy is not WhenEmpty, and
    with its pods and price known."""
    node = round_.node(candidate)
    return (
        not candidate.empty
        and round_.consolidatable(candidate)
        and not round_.world.pools[candidate.nodepool].when_empty
        and node.movable is not None
    )


def movables(round_: Round, chosen: Sequence[Candidate]) -> list[Movable]:
    """The chosen candidates' moves, cheapest to disrupt first."""
    return [m for c in round_.cheapest_first(chosen) if (m := round_.node(c).movable) is not None]
