"""The sim cloud: launches the cheapest allowed offering, refuses during injected capacity
shortages, terminates, and reclaims spot instances when a scenario says so.

Pure: every call takes the clock's `now`; the same calls give the same instances.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from services.sim.catalog import ON_DEMAND, SPOT, InstanceType, Offering, offering_labels
from shared.api.core import Requirement, Taint
from shared.ports import cloud as ports
from shared.scheduling.requirements import Requirements

RUNNING, TERMINATED = "running", "terminated"


class CloudError(ports.CloudError):
    pass


class InsufficientCapacity(CloudError, ports.InsufficientCapacityError):
    """No offering the claim allows can be launched now (upstream: InsufficientCapacityError)."""

    def __init__(self, nodeclaim: str, tried: Sequence[tuple[str, str, str]]) -> None:
        shown = ", ".join(f"{t}/{z}/{c}" for t, z, c in tried[:5]) + (" ..." if len(tried) > 5 else "")
        super().__init__(f"insufficient capacity for nodeclaim {nodeclaim}: no offering available ({shown})")
        self.nodeclaim = nodeclaim
        self.tried = list(tried)


class NoCompatibleOffering(CloudError, ports.NoCompatibleInstanceTypes):
    """No instance type of the catalog satisfies the claim's requirements and requests."""


class InstanceNotFound(CloudError, ports.InstanceNotFound):
    pass


@dataclass(frozen=True, slots=True)
class CapacityWindow:
    """An injected shortage: offerings matching every given field fail to launch in [start, end)."""

    start: datetime
    end: datetime
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None

    def blocks(self, instance_type: str, offering: Offering, now: datetime) -> bool:
        return (
            self.start <= now < self.end
            and self.instance_type in (None, instance_type)
            and self.zone in (None, offering.zone)
            and self.capacity_type in (None, offering.capacity_type)
        )


@dataclass(slots=True)
class LaunchRequest:
    """What the cloud needs from a NodeClaim to launch it."""

    nodeclaim: str
    nodepool: str
    requirements: list[Requirement]
    requests: Mapping[str, Decimal] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    startup_taints: list[Taint] = field(default_factory=list)
    prioritized: list[str] = field(default_factory=list)
    """The claim's types in its planner's order (NodeOverlays in force): launch the first that
    can be, as EC2 Fleet's `prioritized` strategy does; empty, the cheapest (`lowest-price`)."""


@dataclass(slots=True)
class Instance:
    provider_id: str
    request: LaunchRequest
    instance_type: InstanceType
    offering: Offering
    labels: dict[str, str]
    launched_at: datetime
    state: str = RUNNING
    interrupted_at: datetime | None = None
    terminated_at: datetime | None = None


class SimCloud:
    def __init__(self, catalog: Sequence[InstanceType], windows: Iterable[CapacityWindow] = (), seed: int = 0) -> None:
        self.catalog = list(catalog)
        self.by_name = {t.name: t for t in self.catalog}
        self.windows = list(windows)
        self.instances: dict[str, Instance] = {}
        self._offered = [
            (it, o, Requirements.from_labels(offering_labels(it, o))) for it in self.catalog for o in it.offerings
        ]
        self._seed = seed
        self._launched = 0

    def instance_types(self) -> list[InstanceType]:
        return list(self.catalog)

    def candidates(self, request: LaunchRequest) -> list[tuple[InstanceType, Offering]]:
        """Every (type, offering) the claim's requirements allow and whose allocatable holds its
        requests. Like upstream's `Intersects`, a requirement on a label the offering does not
        define (the pool's own labels, `karpenter.sh/nodepool`) does not rule it out."""
        wanted = Requirements.of(request.requirements)
        return [
            (it, offering)
            for it, offering, offered in self._offered
            if all(it.allocatable.get(name, Decimal(0)) >= value for name, value in request.requests.items())
            and not offered.conflicts(wanted)
        ]

    def create(self, request: LaunchRequest, now: datetime) -> Instance:
        """The cheapest offering not short at `now` (or, `prioritized`, the first of its types in
        that order, then the cheapest): spot when the claim allows an available one
        (as upstream prefers), else on demand. Offerings inside a shortage are left out first, as
        upstream's offering cache marks them unavailable, so a spot shortage falls back to on demand."""
        options = self.candidates(request)
        if not options:
            raise NoCompatibleOffering(
                f"nodeclaim {request.nodeclaim}: no instance type of the catalog satisfies its requirements"
            )
        available = [(it, o) for it, o in options if not any(w.blocks(it.name, o, now) for w in self.windows)]
        if not available:
            raise InsufficientCapacity(request.nodeclaim, [(it.name, o.zone, o.capacity_type) for it, o in options])
        capacity_type = SPOT if any(o.capacity_type == SPOT for _, o in available) else ON_DEMAND
        rank = {name: i for i, name in enumerate(request.prioritized)}
        last = len(rank)
        it, offering = min(
            ((it, o) for it, o in available if o.capacity_type == capacity_type),
            key=lambda pair: (rank.get(pair[0].name, last), pair[1].price, pair[0].name, pair[1].zone),
        )
        self._launched += 1
        suffix = random.Random(f"{self._seed}:{self._launched}").getrandbits(40)
        provider_id = f"sim:///{offering.zone}/i-{suffix:010x}"
        labels = {**request.labels, **offering_labels(it, offering)}
        instance = Instance(provider_id, request, it, offering, labels, now)
        self.instances[provider_id] = instance
        return instance

    def delete(self, provider_id: str, now: datetime) -> Instance:
        instance = self.instances.get(provider_id)
        if instance is None or instance.state == TERMINATED:
            raise InstanceNotFound(f"instance {provider_id} does not exist")
        instance.state = TERMINATED
        instance.terminated_at = now
        return instance

    def instance_for(self, nodeclaim: str) -> Instance | None:
        """The running instance launched for a NodeClaim, if any."""
        return next((i for i in self.running() if i.request.nodeclaim == nodeclaim), None)

    def running(self) -> list[Instance]:
        return [i for i in self.instances.values() if i.state == RUNNING]

    def interrupt(self, capacity_type: str, count: int, now: datetime) -> list[Instance]:
        """Mark `count` running instances of the capacity type for reclaiming (the two-minute spot
        notice); which ones is drawn from the seed and the instant."""
        pool = sorted(
            (i for i in self.running() if i.offering.capacity_type == capacity_type and i.interrupted_at is None),
            key=lambda i: i.provider_id,
        )
        picked = random.Random(f"{self._seed}:{now.isoformat()}:{capacity_type}").sample(pool, min(count, len(pool)))
        for instance in picked:
            instance.interrupted_at = now
        return sorted(picked, key=lambda i: i.provider_id)
