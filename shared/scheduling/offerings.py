"""Which instance types a NodePool may launch right now, and at what price (upstream's
`pkg/controllers/provisioning/scheduling/`).

Per pool, before any pod is packed: the types whose labels the pool's requirements allow, with at
least one offering that is allowed (zone, capacity type), not in the insufficient-capacity cache,
and not a spot offering dearer than the cheapest on-demand one (upstream's spot preference); the
DaemonSet overhead the type would carry; and, under limits, only the types whose capacity fits in
what the pool has left. Cheapest first. Pure: the cache takes `now`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from shared.api.core import Taint, TaintEffect, Toleration
from shared.api.labels import CAPACITY_TYPE_LABEL, ZONE_LABEL
from shared.scheduling.requirements import Requirements

ON_DEMAND, SPOT = "on-demand", "spot"
UNAVAILABLE_FOR = timedelta(minutes=3)
_ZERO = Decimal(0)
_MAIN = frozenset({"cpu", "memory", "pods"})


@dataclass(frozen=True, slots=True)
class Offer:
    zone: str
    capacity_type: str
    price: float


@dataclass(frozen=True, slots=True)
class InstanceOption:
    """An instance type as the scheduler sees it: its labels (as requirements), what it offers.
    `offers` can launch; `unavailable` exist but cannot launch now (upstream's offerings with
    `Available: false`): only drift reads them, so nothing plans a launch into one."""

    name: str
    capacity: Mapping[str, Decimal]
    allocatable: Mapping[str, Decimal]
    labels: Mapping[str, str]
    offers: tuple[Offer, ...]
    unavailable: tuple[Offer, ...] = ()
    requirements: Requirements = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", Requirements.from_labels(self.labels))


@dataclass(frozen=True, slots=True)
class DaemonSetPods:
    """What one DaemonSet puts on every node it runs on."""

    requests: Mapping[str, Decimal]
    tolerations: tuple[Toleration, ...] = ()
    requirements: Requirements = field(default_factory=Requirements)


@dataclass(frozen=True, slots=True)
class Option:
    """An instance type a pool may launch now: the offers it may use, cheapest first, and the
    room a node of it leaves for pods once its DaemonSets run."""

    instance: InstanceOption
    offers: tuple[Offer, ...]
    room: Mapping[str, Decimal]
    cpu: Decimal = field(init=False, compare=False)
    memory: Decimal = field(init=False, compare=False)
    pods: Decimal = field(init=False, compare=False)
    zones: frozenset[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        """The room as plain fields: a pass compares them millions of times."""
        room = self.room
        object.__setattr__(self, "cpu", room.get("cpu", _ZERO))
        object.__setattr__(self, "memory", room.get("memory", _ZERO))
        object.__setattr__(self, "pods", room.get("pods", _ZERO))
        object.__setattr__(self, "zones", frozenset(o.zone for o in self.offers))

    @property
    def price(self) -> float:
        return self.offers[0].price

    def holds(self, used: Mapping[str, Decimal]) -> bool:
        get = used.get
        if get("cpu", _ZERO) > self.cpu or get("memory", _ZERO) > self.memory or get("pods", _ZERO) > self.pods:
            return False
        if used.keys() <= _MAIN:
            return True
        return all(value <= self.room.get(name, _ZERO) for name, value in used.items() if name not in _MAIN)


class UnavailableOfferings:
    """Upstream's insufficient-capacity cache: an offering that failed to launch is skipped for
    `ttl`, then tried again."""

    def __init__(self, ttl: timedelta = UNAVAILABLE_FOR) -> None:
        self.ttl = ttl
        self._until: dict[tuple[str, str, str], datetime] = {}

    def mark(self, instance_type: str, zone: str, capacity_type: str, now: datetime) -> None:
        self._until[(instance_type, zone, capacity_type)] = now + self.ttl

    def available(self, instance_type: str, offer: Offer, now: datetime) -> bool:
        until = self._until.get((instance_type, offer.zone, offer.capacity_type))
        return until is None or now >= until

    def unavailable(self, instance_types: Iterable[str], now: datetime) -> list[tuple[str, str, str]]:
        """The offerings of these types skipped at `now`: what a launch must not fall back on
        either (a claim's requirements allow every pairing of its types, zones and capacity types)."""
        types = set(instance_types)
        return sorted(key for key, until in self._until.items() if key[0] in types and now < until)


def daemon_overhead(
    daemonsets: Iterable[DaemonSetPods], taints: Sequence[Taint], template: Requirements, instance: InstanceOption
) -> dict[str, Decimal]:
    """Requests of the DaemonSet pods a node of this pool and type would run: those that tolerate
    the pool's taints (startup taints do not count: they go away) and whose requirements the
    template and the type allow."""
    offered = Requirements(template.values())
    for key in instance.requirements:
        offered.add(instance.requirements[key])
    return _overhead(
        ds for ds in daemonsets if _tolerates(ds.tolerations, taints) and not offered.incompatible(ds.requirements)
    )


def node_daemon_overhead(
    daemonsets: Iterable[DaemonSetPods], taints: Sequence[Taint], labels: Mapping[str, str]
) -> dict[str, Decimal]:
    """Requests of the DaemonSet pods a node with these labels and (non-startup) taints will run:
    what a node still starting, or a claim in flight, has to keep free for them."""
    return _overhead(
        ds for ds in daemonsets if _tolerates(ds.tolerations, taints) and ds.requirements.labels_allowed(labels)
    )


def _overhead(daemonsets: Iterable[DaemonSetPods]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for ds in daemonsets:
        for name, value in ds.requests.items():
            out[name] = out.get(name, _ZERO) + value
        out["pods"] = out.get("pods", _ZERO) + 1
    return out


def _tolerates(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> bool:
    return all(
        taint.effect == TaintEffect.PREFER_NO_SCHEDULE or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )


def pool_options(
    template: Requirements,
    taints: Sequence[Taint],
    catalog: Iterable[InstanceOption],
    *,
    daemonsets: Sequence[DaemonSetPods] = (),
    remaining: Mapping[str, Decimal] | None = None,
    unavailable: UnavailableOfferings | None = None,
    now: datetime | None = None,
) -> list[Option]:
    """The types the pool may launch now, cheapest first (see the module's docstring).
    `remaining` is what the pool's limits leave (no key: no limit on it)."""
    out = []
    for instance in catalog:
        if instance.requirements.conflicts(template):
            continue
        if remaining is not None and any(
            value > remaining[name] for name, value in instance.capacity.items() if name in remaining
        ):
            continue
        offers = _usable_offers(instance, template, unavailable, now)
        if not offers:
            continue
        overhead = daemon_overhead(daemonsets, taints, template, instance)
        room = {name: value - overhead.get(name, _ZERO) for name, value in instance.allocatable.items()}
        if any(value < 0 for value in room.values()):
            continue
        out.append(Option(instance, offers, room))
    out.sort(key=lambda o: (o.price, o.instance.name))
    return out


def _usable_offers(
    instance: InstanceOption, template: Requirements, unavailable: UnavailableOfferings | None, now: datetime | None
) -> tuple[Offer, ...]:
    zones = template.get(ZONE_LABEL)
    types = template.get(CAPACITY_TYPE_LABEL)
    offers = [
        o
        for o in instance.offers
        if (zones is None or zones.has(o.zone))
        and (types is None or types.has(o.capacity_type))
        and (unavailable is None or now is None or unavailable.available(instance.name, o, now))
    ]
    on_demand = [o.price for o in offers if o.capacity_type == ON_DEMAND]
    if on_demand:  # spot preference: a spot offer dearer than the cheapest on-demand one is dropped
        cheapest = min(on_demand)
        offers = [o for o in offers if o.capacity_type != SPOT or o.price <= cheapest]
    return tuple(sorted(offers, key=lambda o: (o.price, o.zone, o.capacity_type)))
