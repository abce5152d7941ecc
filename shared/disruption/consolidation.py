"""Consolidation (upstream's `pkg/controllers/disruption/consolidation.go`, reason Underutilized):
remove nodes whose pods fit elsewhere, or replace them with one strictly cheaper node. What the
two methods share: `evaluate` judges a set of candidates; `singlenode` and `multinode` choose
which sets to judge.

A simulation's outcome: a candidate pod that fits nowhere, or a plan that leans on a node not yet
initialized, is no command; no new claim is a delete; exactly one is a replace, kept to the
cheaper types (`pricing`); more than one is no command. A replace also needs its claim in the
candidates' own pool: the store counts a replacement against its decision's pool, so one the
scheduler would put in another pool could never launch (it was decided, refused at validation and
decided again, pass after pass). A multi-node replacement is also filtered by
`filterOutSameInstanceType`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Candidate
from shared.disruption.command import Command
from shared.disruption.method import Round
from shared.disruption.pricing import Replacement, cheaper, filter_out_same_instance_type, replacement
from shared.disruption.simulation import ClusterView, Movable, simulate
from shared.scheduling.values import PlannedClaim

REASON = DisruptionReason.UNDERUTILIZED
ANOTHER_POOL = "Can't replace with a node of another NodePool"
"""Ours: upstream may launch a replacement in any pool; nodewright counts it in its candidates'."""
Replaceable = Callable[[str, int], bool]
"""Whether a pool's node hard limit lets `n` replacements launch before its candidates go."""


def any_replacement(nodepool: str, count: int) -> bool:
    return True


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


def evaluate(chosen: Sequence[Movable], cluster: ClusterView, *, spot_to_spot: bool, multi: bool) -> Consolidation:
    """The command consolidating exactly these candidates, or why there is none."""
    simulation = simulate([m.move for m in chosen], cluster)
    if not simulation.valid:
        return Consolidation(None, why_not=simulation.why_not())
    names = tuple(m.nodeclaim for m in chosen)
    claims = simulation.new_claims
    if not claims:
        return Consolidation(Command(REASON, names))
    if len(claims) > 1:
        return Consolidation(None, why_not=f"Can't remove without creating {len(claims)} candidates")
    other = simulation.elsewhere({m.nodepool for m in chosen})
    if other is not None:
        return Consolidation(None, why_not=f"{ANOTHER_POOL} ({other})")
    options = cheaper(claims[0].options, sum(m.price for m in chosen))
    if multi:
        options = filter_out_same_instance_type(options, {m.instance_type for m in chosen})
    chosen_replacement = replacement(options, {m.capacity_type for m in chosen}, spot_to_spot=spot_to_spot)
    if isinstance(chosen_replacement, str):
        return Consolidation(None, why_not=chosen_replacement)
    return Consolidation(Command(REASON, names, replacements=1), chosen_replacement, planned=claims[0])


def savings(command: Command, moves: Sequence[Movable], planned: PlannedClaim | None) -> float:
    """What the command saves an hour: the candidates' prices less the cheapest replacement's."""
    prices = {m.nodeclaim: m.price for m in moves}
    before = sum(prices[c] for c in command.candidates)
    after = min((o.price for o in planned.options), default=0.0) if planned is not None else 0.0
    return round(before - after, 6)


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
