"""One scheduling pass (reference §3, §4): pending pods onto existing capacity, onto NodeClaims
planned in this pass, or onto new NodeClaims of the first NodePool that fits.

- Pods go in first-fit-decreasing order (cpu, then memory, descending; then age and uid).
- Per pod: existing and in-flight nodes first (initialized ones first, then by name), then the
  claims planned in this pass (fewest pods first), then a new claim.
- NodePools by weight descending, then name descending; the first one that fits wins.
- Taints must be tolerated (a pool's startupTaints never block); requirements use the algebra of
  `requirements.py` (undefined well-known labels are allowed).
- A new claim keeps the instance types that still hold all its pods (with DaemonSet overhead),
  reserves the largest of them against the pool's limits, and takes 1 of `nodes` at once: the
  next claim of the same pass sees what is left (upstream does not count `nodes` within a pass).
- Pods that ask for `karpenter.sh/nodepool DoesNotExist` or belong to a DaemonSet are left
  alone, as upstream does.
- Topology (`topology.py`): zone and hostname spread, zone affinity, hostname anti-affinity; a
  claim that takes a zone-constrained pod is pinned to the zone chosen for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from shared.api.core import Operator, Taint, TaintEffect, Toleration
from shared.api.labels import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodepool import NODES_RESOURCE
from shared.scheduling.offerings import (
    DaemonSetPods,
    InstanceOption,
    Option,
    UnavailableOfferings,
    pool_options,
)
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.topology import PodTopology, Topology

MAX_INSTANCE_TYPES = 60
_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class PendingPod:
    key: str
    requests: Mapping[str, Decimal]
    requirements: Requirements = field(default_factory=Requirements)
    tolerations: tuple[Toleration, ...] = ()
    created_at: datetime | None = None
    uid: str = ""
    daemonset: bool = False
    topology: PodTopology = field(default_factory=PodTopology)


@dataclass(slots=True)
class NodeCapacity:
    """An existing or in-flight node: what it offers and what it has left. `taints` are those
    that block scheduling: leave out the startup taints of a node still starting."""

    name: str
    labels: Mapping[str, str]
    taints: Sequence[Taint]
    free: dict[str, Decimal]
    initialized: bool = True


@dataclass(frozen=True, slots=True)
class PoolTemplate:
    """A Ready NodePool as a pass sees it; `remaining` is what its limits leave (None: no limits)."""

    name: str
    requirements: Requirements
    weight: int = 0
    taints: tuple[Taint, ...] = ()
    remaining: Mapping[str, Decimal] | None = None


@dataclass(slots=True)
class PlannedClaim:
    id: str
    nodepool: str
    requirements: Requirements
    options: list[Option]
    pods: list[str]
    used: dict[str, Decimal]

    @property
    def instance_types(self) -> list[str]:
        return [o.instance.name for o in self.options[:MAX_INSTANCE_TYPES]]

    def capacity_types(self) -> list[str]:
        return sorted({offer.capacity_type for o in self.options for offer in o.offers})

    def zones(self) -> list[str]:
        return sorted({offer.zone for o in self.options for offer in o.offers})


@dataclass(slots=True)
class Plan:
    placed: dict[str, str] = field(default_factory=dict)  # pod -> existing node
    claims: list[PlannedClaim] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)  # pod -> why, in upstream's words
    ignored: list[str] = field(default_factory=list)


def schedule(
    pods: Iterable[PendingPod],
    nodes: Iterable[NodeCapacity],
    pools: Iterable[PoolTemplate],
    catalog: Sequence[InstanceOption],
    *,
    daemonsets: Sequence[DaemonSetPods] = (),
    unavailable: UnavailableOfferings | None = None,
    now: datetime | None = None,
    running: Iterable[tuple[Mapping[str, str], str | None, str]] = (),
) -> Plan:
    """`running`: (labels, zone, node) of the pods already running, for the topology rules."""
    plan = Plan()
    topology = Topology(running)
    existing = sorted((replace(n, free=dict(n.free)) for n in nodes), key=lambda n: (not n.initialized, n.name))
    ordered_pools = [
        replace(p, requirements=_with_pool_label(p))
        for p in sorted(pools, key=lambda p: (-p.weight, _descending(p.name)))
    ]
    remaining = {p.name: dict(p.remaining) if p.remaining is not None else None for p in ordered_pools}
    options = {
        p.name: pool_options(p.requirements, p.taints, catalog, daemonsets=daemonsets, unavailable=unavailable, now=now)
        for p in ordered_pools
    }
    known_zones = {z for n in existing if (z := n.labels.get(ZONE_LABEL))} | {
        offer.zone for pool_options_ in options.values() for o in pool_options_ for offer in o.offers
    }
    for pod in sorted(pods, key=_queue_order):
        if pod.daemonset or _avoids_nodepools(pod):
            plan.ignored.append(pod.key)
            continue
        zones = _zones_for(pod, topology, known_zones)
        node = next((n for n in existing if _fits_node(pod, n) and _node_allowed(pod, n, topology, zones)), None)
        if node is not None:
            for name, value in pod.requests.items():
                node.free[name] = node.free.get(name, _ZERO) - value
            node.free["pods"] = node.free.get("pods", _ZERO) - 1
            plan.placed[pod.key] = node.name
            topology.record(pod.topology, node.labels.get(ZONE_LABEL), node.name)
            continue
        claim = next(
            (c for c in sorted(plan.claims, key=lambda c: len(c.pods)) if _add_to_claim(pod, c, topology, zones)), None
        )
        if claim is None:
            reasons = []
            for pool in ordered_pools:
                why = _new_claim(pod, pool, options[pool.name], remaining, plan, zones)
                if why is None:
                    claim = plan.claims[-1]
                    break
                reasons.append(f'incompatible with nodepool "{pool.name}", {why}')
            else:
                plan.unplaced[pod.key] = "; ".join(reasons) or "no nodepool is ready"
                continue
        pinned = claim.requirements.get(ZONE_LABEL)
        zone = next(iter(pinned.values)) if pinned is not None and len(pinned) == 1 else None
        topology.record(pod.topology, zone, claim.id)
    return plan


def _zones_for(pod: PendingPod, topology: Topology, known: set[str]) -> list[str] | None:
    """For a pod with zone rules, the zones they allow, best first; None when it has none."""
    if not pod.topology.zonal:
        return None
    wanted = pod.requirements.get(ZONE_LABEL)
    return topology.zones_allowed(pod.topology, (z for z in known if wanted is None or wanted.has(z)))


def _node_allowed(pod: PendingPod, node: NodeCapacity, topology: Topology, zones: list[str] | None) -> bool:
    if not pod.topology.constrained:
        return True
    if zones is not None and node.labels.get(ZONE_LABEL) not in zones:
        return False
    return topology.host_allowed(pod.topology, node.name)


def _pin(requirements: Requirements, zones: list[str] | None, offered: Iterable[str]) -> bool:
    """Pin the requirements to the best zone the rules allow and the options offer; False if none."""
    if zones is None:
        return True
    offered = set(offered)
    zone = next((z for z in zones if z in offered), None)
    if zone is None:
        return False
    requirements.add(ValueSet.exactly(ZONE_LABEL, zone))
    return True


def _with_pool_label(pool: PoolTemplate) -> Requirements:
    """The template's requirements and `karpenter.sh/nodepool=<name>`, as upstream's template has."""
    out = Requirements(pool.requirements.values())
    out.add(ValueSet.exactly(NODEPOOL_LABEL, pool.name))
    return out


def _queue_order(pod: PendingPod) -> tuple[Decimal, Decimal, str, str]:
    created = pod.created_at.isoformat() if pod.created_at else ""
    return (-pod.requests.get("cpu", _ZERO), -pod.requests.get("memory", _ZERO), created, pod.uid or pod.key)


def _descending(name: str) -> tuple[int, ...]:
    return (*(-ord(ch) for ch in name), 1)  # the 1 ends a name after any longer name it begins


def _avoids_nodepools(pod: PendingPod) -> bool:
    wanted = pod.requirements.get(NODEPOOL_LABEL)
    return wanted is not None and wanted.operator == Operator.DOES_NOT_EXIST


def _tolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> str | None:
    for taint in taints:
        if taint.effect != TaintEffect.PREFER_NO_SCHEDULE and not any(t.tolerates(taint) for t in tolerations):
            return f"did not tolerate {taint.key}={taint.value or ''}:{taint.effect}"
    return None


def _fits_node(pod: PendingPod, node: NodeCapacity) -> bool:
    if _tolerated(pod.tolerations, node.taints) is not None:
        return False
    if not pod.requirements.labels_allowed(node.labels):
        return False
    if node.free.get("pods", _ZERO) < 1:
        return False
    return all(value <= node.free.get(name, _ZERO) for name, value in pod.requests.items())


def _still_fitting(options: Iterable[Option], requirements: Requirements, used: Mapping[str, Decimal]) -> list[Option]:
    """The options whose type and offers the requirements allow and whose room holds `used`."""
    out = []
    zones, types = requirements.get(ZONE_LABEL), requirements.get(CAPACITY_TYPE_LABEL)
    for option in options:
        if option.instance.requirements.intersects(requirements):
            continue
        if any(value > option.room.get(name, _ZERO) for name, value in used.items()):
            continue
        offers = tuple(
            o
            for o in option.offers
            if (zones is None or zones.has(o.zone)) and (types is None or types.has(o.capacity_type))
        )
        if offers:
            out.append(option if offers == option.offers else Option(option.instance, offers, option.room))
    return out


def _with(used: Mapping[str, Decimal], pod: PendingPod) -> dict[str, Decimal]:
    out = dict(used)
    for name, value in pod.requests.items():
        out[name] = out.get(name, _ZERO) + value
    out["pods"] = out.get("pods", _ZERO) + 1
    return out


def _add_to_claim(pod: PendingPod, claim: PlannedClaim, topology: Topology, zones: list[str] | None) -> bool:
    if claim.requirements.compatible(pod.requirements):
        return False
    if pod.topology.constrained and not topology.host_allowed(pod.topology, claim.id):
        return False
    merged = Requirements(claim.requirements.values())
    for key in pod.requirements:
        merged.add(pod.requirements[key])
    if not _pin(merged, zones, claim.zones()):
        return False
    used = _with(claim.used, pod)
    options = _still_fitting(claim.options, merged, used)
    if not options:
        return False
    claim.requirements, claim.options, claim.used = merged, options, used
    claim.pods.append(pod.key)
    return True


def _new_claim(
    pod: PendingPod,
    pool: PoolTemplate,
    pool_options_: list[Option],
    remaining: dict[str, dict[str, Decimal] | None],
    plan: Plan,
    zones: list[str] | None = None,
) -> str | None:
    """Plan a new claim of `pool` for the pod, or say why it cannot."""
    why = _tolerated(pod.tolerations, pool.taints)
    if why is not None:
        return why
    conflict = pool.requirements.compatible(pod.requirements)
    if conflict:
        return "incompatible requirements, " + "; ".join(conflict)
    left = remaining[pool.name]
    if left is not None and NODES_RESOURCE in left and left[NODES_RESOURCE] < 1:
        return "node limits have been exhausted for nodepool"
    candidates = pool_options_
    if left is not None:
        candidates = [o for o in candidates if all(v <= left[k] for k, v in o.instance.capacity.items() if k in left)]
        if not candidates and pool_options_:
            return "all available instance types exceed limits for nodepool"
    merged = Requirements(pool.requirements.values())
    for key in pod.requirements:
        merged.add(pod.requirements[key])
    if not _pin(merged, zones, (offer.zone for o in candidates for offer in o.offers)):
        return "no zone satisfies the pod's topology rules"
    used = _with({}, pod)
    options = _still_fitting(candidates, merged, used)
    if not options:
        wanted = sorted(map(str, merged.values()))
        return f"no instance type satisfied resources {_shown(pod.requests)} and requirements {wanted}"
    if left is not None:  # reserve the largest candidate, and one node, at once
        for name in left:
            if name == NODES_RESOURCE:
                left[name] -= 1
            else:
                left[name] -= max(o.instance.capacity.get(name, _ZERO) for o in options)
    plan.claims.append(PlannedClaim(f"claim-{len(plan.claims)}", pool.name, merged, options, [pod.key], used))
    return None


def _shown(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(values.items())}


def claim_requirements(claim: PlannedClaim) -> Requirements:
    """What the NodeClaim asks of the cloud: its requirements, the instance types (the cheapest
    60), the capacity types and zones its offers allow."""
    out = Requirements(claim.requirements.values())
    out.add(ValueSet(INSTANCE_TYPE_LABEL, frozenset(claim.instance_types)))
    out.add(ValueSet(CAPACITY_TYPE_LABEL, frozenset(claim.capacity_types())))
    out.add(ValueSet(ZONE_LABEL, frozenset(claim.zones())))
    return out
