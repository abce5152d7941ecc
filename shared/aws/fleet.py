"""What a NodeClaim's CreateFleet asks for, and what its answer means: pure.

As upstream's instance provider (aws/karpenter-provider-aws `pkg/providers/instance/instance.go`:
`getCapacityType`, `getOverrides`, `updateUnavailableOfferingsCache`, `combineFleetErrors`; the
codes of `pkg/errors/errors.go`): the claim's requirements select catalog offerings (type, zone,
capacity type); spot is asked for when the claim allows a spot offering, else on demand; one
override per (type, zone) with a subnet in that zone, cheapest first, at most 60 types; a claim
planned under NodeOverlays (its `prioritized` types) asks a prioritized fleet, each override's
`Priority` its type's rank, as upstream does when an overlay adjusted a price; a fleet
that launched nothing is an insufficient-capacity error when EC2 said capacity, naming the
offerings it refused, else a plain error. The rules are written out in docs/aws.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from shared.api.core import Requirement
from shared.aws import labels as L
from shared.aws.instance_types import InstanceTypeEntry
from shared.scheduling.requirements import Requirements

ON_DEMAND, SPOT = "on-demand", "spot"
MAX_INSTANCE_TYPES = 60
"""Upstream's `maxInstanceTypes`: the most types one CreateFleet names."""
ALLOCATION_STRATEGY = {ON_DEMAND: "lowest-price", SPOT: "price-capacity-optimized"}
PRIORITIZED_STRATEGY = {ON_DEMAND: "prioritized", SPOT: "capacity-optimized-prioritized"}
"""Upstream's strategies when an overlay adjusted a price: EC2 follows each override's `Priority`
(lower first), not its own prices, strictly on demand and as far as capacity allows for spot."""
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "MaxFleetCountExceeded",
        "ReservationCapacityExceeded",
    }
)
"""Fleet error codes that mean "no capacity for this offering now" (upstream's unfulfillable
capacity codes): the offering goes in the insufficient-capacity cache."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One offering the claim allows: an instance type in a zone at a capacity type."""

    entry: InstanceTypeEntry
    zone: str
    capacity_type: str
    price: float

    @property
    def instance_type(self) -> str:
        return self.entry.name


@dataclass(frozen=True, slots=True)
class Override:
    instance_type: str
    zone: str
    subnet_id: str
    price: float
    rank: int | None = None
    """The type's place in the claim's `prioritized` list (None: the claim has none)."""

    @property
    def priority(self) -> float:
        """EC2's `Priority` (lower is preferred): the rank when the claim ordered its types, so
        every zone of a type ties, as EC2 allows; else the price, as upstream always sends it
        (`lowest-price` and `price-capacity-optimized` do not read it)."""
        return self.price if self.rank is None else self.rank

    def as_request(self) -> dict[str, Any]:
        """The FleetLaunchTemplateOverridesRequest; the zone is redundant beside the subnet but
        lets a capacity error name its offering without another call (as upstream sets it)."""
        return {
            "InstanceType": self.instance_type,
            "SubnetId": self.subnet_id,
            "AvailabilityZone": self.zone,
            "Priority": self.priority,
        }


def candidates(
    entries: Iterable[InstanceTypeEntry],
    requirements: Iterable[Mapping[str, Any]],
    requests: Mapping[str, Decimal] | None = None,
) -> list[Candidate]:
    """Every available offering whose type's labels, zone and capacity type the requirements
    allow and whose allocatable holds the requests. A requirement on a label the type does not
    define (the pool's own labels) does not rule it out, as upstream's `Intersects`."""
    wanted = Requirements.of(Requirement.model_validate(r) for r in requirements)
    zones, capacities = wanted.get(L.ZONE_LABEL), wanted.get(L.CAPACITY_TYPE_LABEL)
    requests = requests or {}
    out = []
    types = wanted.get(L.INSTANCE_TYPE_LABEL)
    if types is not None and not types.complement:  # the types the scheduler chose: look only at those
        entries = [e for e in entries if e.name in types.values]
    for entry in entries:
        if any(entry.allocatable.get(name, Decimal(0)) < value for name, value in requests.items()):
            continue
        if not _allows(wanted, entry.labels):
            continue
        for offering in entry.offerings:
            if (
                offering.available
                and (zones is None or zones.has(offering.zone))
                and (capacities is None or capacities.has(offering.capacity_type))
            ):
                out.append(Candidate(entry, offering.zone, offering.capacity_type, offering.price))
    return out


def without(found: Sequence[Candidate], unavailable: Iterable[Sequence[str]]) -> list[Candidate]:
    """The candidates but those the insufficient-capacity cache holds ((type, zone, capacity
    type)): a claim allows every pairing of its types, zones and capacity types, so the cache's
    offerings are left out here too, as upstream marks them unavailable in its offerings."""
    skipped = {tuple(o) for o in unavailable}
    return [c for c in found if (c.instance_type, c.zone, c.capacity_type) not in skipped]


def _allows(wanted: Requirements, labels: Mapping[str, str]) -> bool:
    """`Requirements.from_labels(labels).intersects(wanted)` is empty, without building one per
    type: a label's single value meets a requirement exactly when the requirement has it."""
    return all(wanted[key].has(value) for key, value in labels.items() if key in wanted)


def capacity_type(found: Sequence[Candidate]) -> str:
    """Spot when the claim allows an available spot offering (spot is cheaper), else on demand."""
    return SPOT if any(c.capacity_type == SPOT for c in found) else ON_DEMAND


def overrides(
    found: Sequence[Candidate], subnets: Mapping[str, str], chosen: str, prioritized: Sequence[str] = ()
) -> list[Override]:
    """The overrides for `chosen` capacity: one per (type, zone) that has a subnet (`subnets`:
    zone -> subnet id), cheapest first (then by type and zone, so equal prices are stable),
    keeping the first `MAX_INSTANCE_TYPES` types. With `prioritized` (the claim's types in its
    planner's order, NodeOverlays in force) that order comes first and each override carries its
    type's rank; a type the list leaves out ranks after every listed one, as the sim's cloud
    ranks it. EC2 reads only the priorities, but the order keeps the truncation to the
    preferred types and is what moto, which takes the first override, launches."""
    ranks = {name: i for i, name in enumerate(prioritized)}
    by_offering: dict[tuple[str, str], Override] = {}
    for c in found:
        if c.capacity_type != chosen or c.zone not in subnets:
            continue
        key = (c.instance_type, c.zone)
        if key not in by_offering or c.price < by_offering[key].price:
            rank = ranks.get(c.instance_type, len(ranks)) if prioritized else None
            by_offering[key] = Override(c.instance_type, c.zone, subnets[c.zone], c.price, rank)
    ordered = sorted(
        by_offering.values(), key=lambda o: (0 if o.rank is None else o.rank, o.price, o.instance_type, o.zone)
    )
    kept: list[str] = []
    for o in ordered:
        if o.instance_type not in kept and len(kept) < MAX_INSTANCE_TYPES:
            kept.append(o.instance_type)
    allowed = set(kept)
    return [o for o in ordered if o.instance_type in allowed]


def client_token(cluster: str, claim: str) -> str:
    """CreateFleet's idempotency token for one claim: EC2 answers a request repeated with it as it
    answered the first, so a launch retried after a crash launches nothing more (at most 64 ASCII
    characters)."""
    return hashlib.sha256(f"{cluster}/{claim}".encode()).hexdigest()[:64]


def allocation_strategy(chosen: str, prioritized: bool) -> str:
    """EC2's own prices decide (`ALLOCATION_STRATEGY`) unless the claim ordered its types: then
    the overrides' priorities do (`PRIORITIZED_STRATEGY`), so an overlay's price is not overruled."""
    return (PRIORITIZED_STRATEGY if prioritized else ALLOCATION_STRATEGY)[chosen]


def fleet_request(
    configs: Sequence[tuple[str, Sequence[Override]]], chosen: str, tags: Mapping[str, str]
) -> dict[str, Any]:
    """CreateFleet's parameters: an `instant` fleet of one instance over the launch templates
    (`configs`: template name -> its overrides), tagging the instance, its volumes and the fleet.
    Overrides ranked by a `prioritized` list ask for the prioritized strategy."""
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    request: dict[str, Any] = {
        "Type": "instant",
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": chosen},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"},
                "Overrides": [o.as_request() for o in chosen_overrides],
            }
            for name, chosen_overrides in configs
        ],
        "TagSpecifications": [{"ResourceType": r, "Tags": tag_list} for r in ("instance", "volume", "fleet")],
    }
    ranked = any(o.rank is not None for _, chosen_overrides in configs for o in chosen_overrides)
    options = {"AllocationStrategy": allocation_strategy(chosen, ranked)}
    request["SpotOptions" if chosen == SPOT else "OnDemandOptions"] = options
    return request


@dataclass(frozen=True, slots=True)
class Launched:
    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    launched: Launched | None
    refused: tuple[tuple[str, str, str], ...]
    """(type, zone, capacity type) of the offerings EC2 had no capacity for."""
    errors: tuple[str, ...]
    """Every error, as `code: message`."""

    @property
    def capacity_only(self) -> bool:
        """Nothing launched and every error said capacity: the claim's offerings are short."""
        return self.launched is None and bool(self.refused) and len(self.refused) == len(self.errors)


def read_fleet(answer: Mapping[str, Any], chosen: str) -> FleetOutcome:
    """CreateFleet's answer: the instance launched (if any) and the offerings refused."""
    refused: list[tuple[str, str, str]] = []
    errors: list[str] = []
    for error in answer.get("Errors") or []:
        code = str(error.get("ErrorCode") or "Unknown")
        errors.append(f"{code}: {error.get('ErrorMessage') or ''}".rstrip(": "))
        o = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        if code in CAPACITY_ERRORS and o.get("InstanceType") and o.get("AvailabilityZone"):
            offering = (o["InstanceType"], o["AvailabilityZone"], _capacity(error.get("Lifecycle"), chosen))
            if offering not in refused:
                refused.append(offering)
    launched = None
    for instance in answer.get("Instances") or []:
        ids = instance.get("InstanceIds") or []
        if ids:
            o = (instance.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            launched = Launched(
                ids[0],
                str(instance.get("InstanceType") or o.get("InstanceType") or ""),
                str(o.get("AvailabilityZone") or ""),
                _capacity(instance.get("Lifecycle"), chosen),
            )
            break
    return FleetOutcome(launched, tuple(refused), tuple(errors))


def _capacity(lifecycle: object, chosen: str) -> str:
    """EC2 says `spot` or `on-demand` per instance; moto may leave it out."""
    return lifecycle if lifecycle in (SPOT, ON_DEMAND) else chosen  # type: ignore[return-value]


def describe_offerings(offerings: Sequence[tuple[str, str, str]], limit: int = 5) -> str:
    shown = ", ".join("/".join(o) for o in offerings[:limit])
    return shown + (f" and {len(offerings) - limit} more" if len(offerings) > limit else "")
