"""The price rules of a consolidation's replacement (upstream's
`pkg/controllers/disruption/consolidation.go`), apart from the simulation that finds it: only types
whose worst available price is strictly below what the candidates cost now;
`filterOutSameInstanceType` for multi-node; spot-to-spot only when enabled, and then only with
enough cheaper types; a replacement that allows spot is pinned to spot."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from shared.scheduling.offerings import ON_DEMAND, SPOT, Option

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
    options: Sequence[Option], candidate_capacity_types: Collection[str], *, spot_to_spot: bool
) -> Replacement | str:
    """The replacement's types and capacity type, or why there is none (upstream's message).
    `options`: the cheaper types, cheapest first. (Upstream keeps more than 15 when the claim's
    minValues need them; nodewright's scheduler keeps minValues strict on its own.)"""
    if not options:
        return NOT_CHEAPER
    may_spot = any(offer.capacity_type == SPOT for o in options for offer in o.offers)
    all_spot = bool(candidate_capacity_types) and set(candidate_capacity_types) == {SPOT}
    if all_spot and may_spot:
        if not spot_to_spot:
            return SPOT_TO_SPOT_DISABLED
        spot = [o for o in options if any(offer.capacity_type == SPOT for offer in o.offers)]
        if len(spot) < SPOT_TO_SPOT_MINIMUM:
            return (
                f"SpotToSpotConsolidation requires {SPOT_TO_SPOT_MINIMUM} cheaper instance type options than the "
                f"current candidate to consolidate, got {len(spot)}"
            )
        return Replacement(tuple(spot[:SPOT_TO_SPOT_MINIMUM]), SPOT)
    return Replacement(tuple(options), SPOT if may_spot else ON_DEMAND)
