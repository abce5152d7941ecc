"""NodeOverlays applied to the instance types each NodePool plans with (upstream's
`pkg/controllers/nodeoverlay/`, behind the `NodeOverlay` gate).

Upstream's rules, learnt from its controller and store:

- order: higher `weight` first (unset is 0); equal weights, the name later in the alphabet first;
- selection: an overlay applies to a pool's instance type when its requirements are compatible
  with the type's labels, its offerings' zones and capacity types, the pool's name
  (`karpenter.sh/nodepool`) and the pool's template labels; a key it asks for (In, Exists, Gt...)
  that none of those define does not match. Within a type, a price applies to the offerings whose
  zone and capacity type the requirements allow;
- price: the first overlay in order to reach an offering sets its price; later ones do not stack.
  `price` replaces it; `priceAdjustment` adds an amount (`+0.5`, `-0.1`) or a percentage (`-10%`),
  never below 0;
- capacity: extended resources are added to the type's capacity and allocatable; for each
  resource the first overlay in order wins;
- conflict: an overlay of the same weight as the last one applied to an offering's price (or to a
  capacity resource it also sets) conflicts; it is applied nowhere, and its status says so. An
  overlay that fails runtime validation is applied nowhere either.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from shared.api.core import Requirement
from shared.api.labels import CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodeoverlay import NodeOverlay
from shared.api.nodeoverlay_validation import runtime_errors
from shared.api.quantity import parse
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.requirements import Requirements, ValueSet

CONFLICT = "Conflict"
CONFLICT_MESSAGE = "conflict with another overlay"
RUNTIME_VALIDATION = "RuntimeValidation"
"""The reasons of a False `ValidationSucceeded` condition, upstream's."""


def ordered(overlays: Iterable[NodeOverlay]) -> list[NodeOverlay]:
    """Upstream's `OrderByWeight`: the heaviest first, equal weights by name, later names first."""
    by_name = sorted(overlays, key=lambda o: o.name, reverse=True)
    return sorted(by_name, key=lambda o: -(o.spec.weight or 0))


def adjusted_price(price: float, change: str) -> float:
    """An offering's price after an overlay's `price` (no sign: the new price) or
    `priceAdjustment` (signed: an amount, or a percentage with `%`), clamped at 0. The text has
    passed the CRD's patterns."""
    if not change:
        return price
    if change[0] not in "+-":
        return float(change)
    out = price * (1 + float(change[:-1]) / 100) if change.endswith("%") else price + float(change)
    return max(out, 0.0)


@dataclass(frozen=True, slots=True)
class PoolLabels:
    """What an overlay may select a pool's instance types by, besides the types' own labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _PriceUpdate:
    change: str
    weight: int


@dataclass(slots=True)
class _TypeUpdate:
    prices: dict[tuple[str, str], _PriceUpdate] = field(default_factory=dict)
    capacity: dict[str, Decimal] = field(default_factory=dict)
    capacity_weight: int | None = None
    last_capacity: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Resolution:
    """The catalogs the overlays change (by pool; a pool they do not touch is absent), and which
    overlays were not applied: in conflict, or failing runtime validation (with why)."""

    catalogs: Mapping[str, tuple[InstanceOption, ...]]
    conflicting: frozenset[str]
    invalid: Mapping[str, str]
    applied: frozenset[str]


def _selection(overlay: NodeOverlay) -> Requirements:
    return Requirements.of(
        Requirement(key=r.key, operator=r.operator, values=r.values) for r in overlay.spec.requirements
    )


def _type_requirements(pool: PoolLabels, option: InstanceOption) -> Requirements:
    """The type as an overlay sees it in this pool: its labels, the zones and capacity types of
    its offerings, the pool's name and template labels."""
    out = Requirements.from_labels({**pool.labels, **option.labels, NODEPOOL_LABEL: pool.name})
    for key, values in (
        (ZONE_LABEL, {o.zone for o in option.offers}),
        (CAPACITY_TYPE_LABEL, {o.capacity_type for o in option.offers}),
    ):
        if key not in option.labels and values:
            out.add(ValueSet(key, frozenset(values), present=True))
    return out


def _offers(selection: Requirements, pool: PoolLabels, option: InstanceOption) -> list[tuple[str, str]]:
    """The offerings (zone, capacity type) of the type the overlay selects; none if it does not
    select the type."""
    if _type_requirements(pool, option).incompatible(selection, allow_undefined=frozenset()):
        return []
    zones, types = selection.get(ZONE_LABEL), selection.get(CAPACITY_TYPE_LABEL)
    return [
        (o.zone, o.capacity_type)
        for o in option.offers
        if (zones is None or zones.has(o.zone)) and (types is None or types.has(o.capacity_type))
    ]


def _price_change(overlay: NodeOverlay) -> str | None:
    spec = overlay.spec
    return spec.price if spec.price is not None else spec.price_adjustment


def _capacity(overlay: NodeOverlay) -> dict[str, Decimal]:
    return {name: parse(str(q)) for name, q in (overlay.spec.capacity or {}).items()}


def _conflicts(update: _TypeUpdate | None, overlay: NodeOverlay, offers: Sequence[tuple[str, str]]) -> bool:
    """Upstream's check, which relies on the order: only an overlay of the weight last applied
    can conflict with it."""
    if update is None:
        return False
    weight = overlay.spec.weight or 0
    if _price_change(overlay) is not None:
        for key in offers:
            known = update.prices.get(key)
            if known is not None and known.weight == weight:
                return True
    capacity = overlay.spec.capacity or {}
    return bool(capacity and update.capacity_weight == weight and update.last_capacity & capacity.keys())


def _store(update: _TypeUpdate, overlay: NodeOverlay, offers: Sequence[tuple[str, str]]) -> None:
    weight = overlay.spec.weight or 0
    change = _price_change(overlay)
    if change is not None:
        for key in offers:
            known = update.prices.get(key)
            if known is None:
                update.prices[key] = _PriceUpdate(change, weight)
            else:
                known.weight = weight  # the first stays in force; the weight is the last one seen
    capacity = _capacity(overlay)
    if capacity:
        for name, value in capacity.items():
            update.capacity.setdefault(name, value)
        update.capacity_weight, update.last_capacity = weight, frozenset(capacity)


def _applied(option: InstanceOption, update: _TypeUpdate) -> InstanceOption:
    offers = tuple(
        Offer(o.zone, o.capacity_type, adjusted_price(o.price, p.change))
        if (p := update.prices.get((o.zone, o.capacity_type))) is not None
        else o
        for o in option.offers
    )
    if not update.capacity:
        return replace(option, offers=offers)
    return replace(
        option,
        offers=offers,
        capacity={**option.capacity, **update.capacity},
        allocatable={**option.allocatable, **update.capacity},
    )


def resolve(
    overlays: Iterable[NodeOverlay],
    pools: Sequence[PoolLabels],
    catalogs: Mapping[str, Sequence[InstanceOption]],
) -> Resolution:
    """Every overlay against every pool's catalog (`catalogs[pool.name]`), in upstream's order:
    an overlay is checked against all pools before it is stored in any, so a conflict anywhere
    leaves it applied nowhere."""
    updates: dict[str, dict[str, _TypeUpdate]] = {}
    conflicting: set[str] = set()
    invalid: dict[str, str] = {}
    applied: set[str] = set()
    for overlay in ordered(overlays):
        errors = runtime_errors(overlay)
        if errors:
            invalid[overlay.name] = "; ".join(errors)
            continue
        selection = _selection(overlay)
        matched = [
            (pool.name, option.name, offers)
            for pool in pools
            for option in catalogs.get(pool.name, ())
            if (offers := _offers(selection, pool, option))
        ]
        if any(_conflicts(updates.get(p, {}).get(t), overlay, offers) for p, t, offers in matched):
            conflicting.add(overlay.name)
            continue
        for p, t, offers in matched:
            _store(updates.setdefault(p, {}).setdefault(t, _TypeUpdate()), overlay, offers)
        applied.add(overlay.name)
    out: dict[str, tuple[InstanceOption, ...]] = {}
    for pool, by_type in updates.items():
        out[pool] = tuple(_applied(o, by_type[o.name]) if o.name in by_type else o for o in catalogs[pool])
    return Resolution(out, frozenset(conflicting), invalid, frozenset(applied))
