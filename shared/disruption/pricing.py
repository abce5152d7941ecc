"""The price rules of a consolidation's replacement (upstream's
`pkg/controllers/disruption/consolidation.go`), apart from the simulation that finds it: only types
whose worst available price is strictly below what the candidates cost now;
`filterOutSameInstanceType` for multi-node; spot-to-spot only when enabled, and then only with
enough cheaper types; a replacement that allows spot is pinned to spot."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from shared.api.labels import CAPACITY_TYPE_LABEL
from shared.scheduling.offerings import ON_DEMAND, SPOT, Option
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.values import PlannedClaim

SPOT_TO_SPOT_MINIMUM = 15
"""Cheaper types a spot-to-spot replacement needs, and the most it keeps."""
NOT_CHEAPER = "Can't replace with a cheaper node"
SPOT_TO_SPOT_DISABLED = "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"


def worst_price(option: Option) -> float:
    """What a replacement of this type may cost at most: the dearest offer it may launch on."""
    return max(o.price for o in option.offers)


def cheaper(options: Sequence[Option], current_price: float) -> list[Option]:
    """The types whose every usable offer costs strictly less than the candidates now."""
    return [o for o in options if o.offers and worst_price(o) < current_price]


def filter_out_same_instance_type(options: Sequence[Option], candidate_types: Collection[str]) -> list[Option]:
    """Multi-node: when a candidate's own type is among the options, a replacement of that type or
    dearer is no better than deleting the others, so drop every option priced at or above the
    cheapest such type."""
    same = [o.price for o in options if o.instance.name in candidate_types]
    if not same:
        return list(options)
    ceiling = min(same)
    return [o for o in options if o.price < ceiling]


@dataclass(frozen=True, slots=True)
class Replacement:
    options: tuple[Option, ...]
    capacity_type: str | None
    """Pinned to spot when it may be spot; None leaves the launch to choose."""


def replacement(
    options: Sequence[Option], candidate_capacity_types: Collection[str], *, spot_to_spot: bool, multi: bool = False
) -> Replacement | str:
    """The replacement's types and capacity type, or why there is none (upstream's message).
    `options`: the cheaper types, cheapest first. Spot-to-spot (upstream's
    `computeSpotToSpotConsolidation`): a single candidate needs 15 cheaper spot types and keeps
    the 15 cheapest; several (`multi`) need no such flexibility. (Upstream keeps more than 15
    when the claim's minValues need them; nodewright's scheduler keeps minValues strict on its
    own.)"""
    if not options:
        return NOT_CHEAPER
    may_spot = any(offer.capacity_type == SPOT for o in options for offer in o.offers)
    all_spot = bool(candidate_capacity_types) and set(candidate_capacity_types) == {SPOT}
    if all_spot and may_spot:
        if not spot_to_spot:
            return SPOT_TO_SPOT_DISABLED
        spot = [o for o in options if any(offer.capacity_type == SPOT for offer in o.offers)]
        if multi:
            return Replacement(tuple(spot), SPOT)
        if len(spot) < SPOT_TO_SPOT_MINIMUM:
            return (
                f"SpotToSpotConsolidation requires {SPOT_TO_SPOT_MINIMUM} cheaper instance type options than the "
                f"current candidate to consolidate, got {len(spot)}"
            )
        return Replacement(tuple(spot[:SPOT_TO_SPOT_MINIMUM]), SPOT)
    return Replacement(tuple(options), SPOT if may_spot else ON_DEMAND)


def pinned(planned: PlannedClaim, chosen: Replacement) -> PlannedClaim:
    """The planned replacement narrowed to the chosen types and, when pinned, to its capacity
    type: the requirement upstream adds (`karpenter.sh/capacity-type In [spot]`) and only the
    offers of that type, so the launch cannot choose otherwise."""
    options = list(chosen.options)
    requirements = Requirements(planned.requirements.values())
    if chosen.capacity_type is not None:
        requirements.add(ValueSet.exactly(CAPACITY_TYPE_LABEL, chosen.capacity_type))
        options = [
            replace(o, offers=kept)
            for o in options
            if (kept := tuple(offer for offer in o.offers if offer.capacity_type == chosen.capacity_type))
        ]
    return replace(planned, requirements=requirements, options=options)
