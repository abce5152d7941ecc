"""Static NodePools (`spec.replicas`, upstream's `pkg/controllers/static/provisioning`): how many
NodeClaims a static pool still needs, and what each is.

A static pool keeps `replicas` NodeClaims whatever the pending pods: its live count is every
claim of the pool not being deleted, launched or in flight (a claim a disruption has chosen but
not yet asked to delete counts, as upstream counts those pending disruption, so a drift's
replacement never doubles up). A claim is made from the pool's template alone, with no pod
bound to it: its instance types are every one the template allows (the cheapest first, as a
pass settles a claim), and the cloud picks among them at launch. `limits.nodes` is not decided
here: each claim goes through the store's strict reservation, which refuses the one past it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.scheduling.fitting import Fitting
from shared.scheduling.offerings import InstanceOption, Option
from shared.scheduling.packing import with_pool_label
from shared.scheduling.values import PlannedClaim, PoolTemplate

LIMIT_REACHED = "nodepool node limit reached"
"""Upstream's log line when `limits.nodes` holds a static pool below its replicas."""
SCALING_UP = "provisioning nodeclaims to satisfy replica count"
"""Upstream's log line when a static pool launches claims."""


@dataclass(frozen=True, slots=True)
class StaticNeed:
    nodepool: str
    desired: int
    current: int
    total: int = 0
    """Its claims with those being deleted, which `limits.nodes` still counts until they end."""

    @property
    def count(self) -> int:
        """Claims to create now (scale-down is disruption's: `shared.disruption.static`)."""
        return max(self.desired - self.current, 0)


def static_needs(
    replicas: Mapping[str, int], claims: Iterable[tuple[str, str]], deleting: Iterable[str]
) -> list[StaticNeed]:
    """Per static pool (`replicas`: its name -> spec.replicas), what it wants and has; `claims`:
    (claim, pool) of every claim not ended; `deleting`: claims whose deletion was asked for."""
    gone = set(deleting)
    current = dict.fromkeys(replicas, 0)
    total = dict.fromkeys(replicas, 0)
    for claim, pool in claims:
        if pool in current:
            total[pool] += 1
            current[pool] += claim not in gone
    return [StaticNeed(name, replicas[name], current[name], total[name]) for name in sorted(replicas)]


def static_claim(
    pool: PoolTemplate, options: Sequence[Option], catalog: Sequence[InstanceOption], index: int = 0
) -> PlannedClaim | None:
    """One NodeClaim of the pool's template, with no pods (None: no instance type can launch)."""
    if not options:
        return None
    claim = PlannedClaim(f"static-{pool.name}-{index}", pool.name, with_pool_label(pool), list(options), [], {})
    claim.taints = pool.taints
    claim.narrowed(list(options), Fitting(catalog))
    claim.settle()
    return claim if claim.options else None
