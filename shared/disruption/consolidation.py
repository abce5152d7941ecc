"""Consolidation (upstream's `pkg/controllers/disruption/consolidation.go`, reason Underutilized):
remove nodes whose pods fit elsewhere, or replace them with one strictly cheaper node.

A simulation's outcome: a candidate pod that fits nowhere, or a plan that leans on a node not yet
initialized, is no command; no new claim is a delete; exactly one is a replace, kept to the
cheaper types (`pricing`); more than one is no command. A replace also needs its claim in the
candidates' own pool: the store counts a replacement against its decision's pool, so one the
scheduler would put in another pool could never launch (it was decided, refused at validation and
decided again, pass after pass). Single-node takes candidates in order and the first that yields
a command wins; multi-node takes up to 100 candidates within their pools' budgets and finds, by
binary search, the longest prefix of at least two that yields one (its replacement also filtered
by `filterOutSameInstanceType`). Candidates come in the order the caller chose (upstream:
cheapest to disrupt first); consolidationPolicy and Consolidatable are the caller's filter, as
for emptiness.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from shared.api.nodepool import DisruptionReason
from shared.disruption.command import Command
from shared.disruption.pricing import Replacement, cheaper, filter_out_same_instance_type, replacement
from shared.disruption.simulation import ClusterView, Move, simulate
from shared.scheduling.values import PlannedClaim

REASON = DisruptionReason.UNDERUTILIZED
MULTI_NODE_MOST = 100
ANOTHER_POOL = "Can't replace with a node of another NodePool"
"""Ours: upstream may launch a replacement in any pool; nodewright counts it in its candidates'."""
Replaceable = Callable[[str, int], bool]
"""Whether a pool's node hard limit lets `n` replacements launch before its candidates go."""


def any_replacement(nodepool: str, count: int) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Movable:
    """A consolidation candidate: where its pods would go from, and what it costs now."""

    move: Move
    nodepool: str
    price: float
    capacity_type: str
    instance_type: str

    @property
    def nodeclaim(self) -> str:
        return self.move.nodeclaim


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
