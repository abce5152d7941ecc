"""ORACLE BASELINE, not production code: the scheduling pass as it was before the claim index
(commit 8c27508), kept verbatim so tests and the benchmark can check that the indexed pass in
`shared.scheduling.packing` makes the same plan. It takes the production inputs (same fields).

One scheduling pass (upstream's `Scheduler.Solve`): pending pods onto existing capacity, onto NodeClaims
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
from shared.scheduling.topology import PodTopology, Running
from tests.unit.scheduling.baseline_topology import Topology

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

    def copy(self) -> NodeCapacity:
        """A copy whose room a pass may take: `dataclasses.replace` costs three times as much, and
        a consolidation's simulation copies every node of the cluster."""
        return NodeCapacity(self.name, self.labels, self.taints, dict(self.free), self.initialized)


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
    largest: dict[str, Decimal] = field(default_factory=dict)  # per resource, the most any option has
    zone_set: frozenset[str] = frozenset()  # the zones its options offer
    taints: tuple[Taint, ...] = ()  # its pool's: every pod on it must tolerate them

    def narrowed(self, options: list[Option], fitting: _Fitting) -> None:
        """New options (after a requirement narrowed them), and what is derived from them."""
        self.options = options
        self.largest, self.zone_set = fitting.derived(options)

    def could_hold(self, requests: Mapping[str, Decimal]) -> bool:
        """A cheap first look: whether even its largest option has room for these requests more."""
        used, largest = self.used, self.largest
        if used.get("pods", _ZERO) + 1 > largest.get("pods", _ZERO):
            return False
        return all(used.get(k, _ZERO) + v <= largest.get(k, _ZERO) for k, v in requests.items())

    def holds(self, used: Mapping[str, Decimal]) -> bool:
        """Whether some option has room for `used` (the largest ones are looked at first)."""
        return any(o.holds(used) for o in reversed(self.options))

    def settle(self) -> None:
        """At the end of the pass: the cheapest options that hold every pod of the claim, the
        instance types the NodeClaim will name: at most MAX_INSTANCE_TYPES, unless more are
        needed to keep every minValues (as upstream's truncation does)."""
        kept: list[Option] = []
        for option in self.options:
            if option.holds(self.used):
                kept.append(option)
                if len(kept) >= MAX_INSTANCE_TYPES and _min_values_met(self.requirements, kept, self.used):
                    break
        self.options = kept
        self.zone_set = frozenset(offer.zone for o in kept for offer in o.offers)

    @property
    def instance_types(self) -> list[str]:
        """The types the NodeClaim names (`settle` chose them: the cheapest, minValues kept)."""
        return [o.instance.name for o in self.options]

    def capacity_types(self) -> list[str]:
        return sorted({offer.capacity_type for o in self.options for offer in o.offers})

    def zones(self) -> list[str]:
        return sorted(self.zone_set)


@dataclass(slots=True)
class Plan:
    placed: dict[str, str] = field(default_factory=dict)  # pod -> existing node
    claims: list[PlannedClaim] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)  # pod -> why, in upstream's words
    ignored: list[str] = field(default_factory=list)


def _largest(options: Iterable[Option]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for option in options:
        for name, value in option.room.items():
            if value > out.get(name, _ZERO):
                out[name] = value
    return out


def schedule(
    pods: Iterable[PendingPod],
    nodes: Iterable[NodeCapacity],
    pools: Iterable[PoolTemplate],
    catalog: Sequence[InstanceOption],
    *,
    daemonsets: Sequence[DaemonSetPods] = (),
    unavailable: UnavailableOfferings | None = None,
    now: datetime | None = None,
    running: Iterable[Running] = (),
    options: Mapping[str, list[Option]] | None = None,
) -> Plan:
    """`running`: the pods already running, for the topology rules (`topology.Running`);
    `options`: `option_table`'s answer for these pools, when the caller plans many times over
    the same pools and catalog (a consolidation's simulations)."""
    plan = Plan()
    topology = Topology(running)
    existing = sorted((n.copy() for n in nodes), key=lambda n: (not n.initialized, n.name))
    ordered_pools = _ordered(pools)
    remaining = {p.name: dict(p.remaining) if p.remaining is not None else None for p in ordered_pools}
    if options is None:
        options = option_table(ordered_pools, catalog, daemonsets=daemonsets, unavailable=unavailable, now=now)
    known_zones = {z for n in existing if (z := n.labels.get(ZONE_LABEL))} | {
        offer.zone for pool_options_ in options.values() for o in pool_options_ for offer in o.offers
    }
    fitting = _Fitting(catalog)
    by_size: dict[int, list[PlannedClaim]] = {}  # claims by their number of pods: fewest first
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
        claim = _first_taking(pod, by_size, topology, zones, fitting)
        if claim is None:
            reasons = []
            for pool in ordered_pools:
                why = _new_claim(pod, pool, options[pool.name], remaining, plan, zones, fitting)
                if why is None:
                    claim = plan.claims[-1]
                    by_size.setdefault(1, []).append(claim)
                    break
                reasons.append(f'incompatible with nodepool "{pool.name}", {why}')
            else:
                plan.unplaced[pod.key] = "; ".join(reasons) or "no nodepool is ready"
                continue
        pinned = claim.requirements.get(ZONE_LABEL)
        zone = next(iter(pinned.values)) if pinned is not None and len(pinned) == 1 else None
        topology.record(pod.topology, zone, claim.id)
    for claim in plan.claims:
        claim.settle()
    return plan


def _first_taking(
    pod: PendingPod,
    by_size: dict[int, list[PlannedClaim]],
    topology: Topology,
    zones: list[str] | None,
    fitting: _Fitting,
) -> PlannedClaim | None:
    """The claim of this pass, fewest pods first, that takes the pod (and moves up a size)."""
    blocked = topology.blocked_hosts(pod.topology)
    for size in sorted(by_size):
        for index, claim in enumerate(by_size[size]):
            if claim.id in blocked:
                continue
            if claim.could_hold(pod.requests) and _add_to_claim(pod, claim, topology, zones, fitting):
                del by_size[size][index]
                if not by_size[size]:
                    del by_size[size]
                by_size.setdefault(size + 1, []).append(claim)
                return claim
    return None


def _zones_for(pod: PendingPod, topology: Topology, known: set[str]) -> list[str] | None:
    """For a pod with zone rules, the zones they allow, best first; None when it has none."""
    if not pod.topology.zonal:
        return None
    wanted = pod.requirements.get(ZONE_LABEL)
    return topology.zones_allowed(pod.topology, (z for z in known if wanted is None or wanted.has(z)))


def _node_allowed(pod: PendingPod, node: NodeCapacity, topology: Topology, zones: list[str] | None) -> bool:
    if zones is not None and node.labels.get(ZONE_LABEL) not in zones:
        return False
    return node.name not in topology.blocked_hosts(pod.topology)


def _pinned_to(claim: PlannedClaim, zones: list[str]) -> bool:
    """Whether the claim is pinned already to the zone the rules would pick for it."""
    pinned = claim.requirements.get(ZONE_LABEL)
    if pinned is None or pinned.complement or len(pinned.values) != 1:
        return False
    best = next((z for z in zones if z in claim.zone_set), None)
    return best is not None and best in pinned.values


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


def _ordered(pools: Iterable[PoolTemplate]) -> list[PoolTemplate]:
    """By weight, then name descending (upstream's order), each with its pool label required."""
    ordered = sorted(pools, key=lambda p: (-p.weight, _descending(p.name)))
    return [replace(p, requirements=_with_pool_label(p)) for p in ordered]


def option_table(
    pools: Iterable[PoolTemplate],
    catalog: Sequence[InstanceOption],
    *,
    daemonsets: Sequence[DaemonSetPods] = (),
    unavailable: UnavailableOfferings | None = None,
    now: datetime | None = None,
) -> dict[str, list[Option]]:
    """Each pool's launchable options, as a pass computes them: the costly part of a pass over
    few pods, so many passes over the same pools and catalog compute it once."""
    found: dict[str, list[Option]] = {}
    for pool in pools:
        requirements = _with_pool_label(pool)
        found[pool.name] = pool_options(
            requirements, pool.taints, catalog, daemonsets=daemonsets, unavailable=unavailable, now=now
        )
    return found


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


class _Fitting:
    """What requirements leave of a claim's options, for one pass. A pass asks the same few
    questions thousands of times, so it remembers: which instance types each distinct set of
    label requirements allows, each option narrowed to the zones and capacity types allowed,
    and the answers for each list of options it was given (lists are never changed in place)."""

    def __init__(self, catalog: Sequence[InstanceOption]) -> None:
        self.catalog = catalog
        self.label_keys = {key for it in catalog for key in it.labels}
        self._allowed: dict[tuple[ValueSet, ...], frozenset[str]] = {}
        self._narrowed: dict[tuple[ValueSet | None, ValueSet | None], dict[int, Option | None]] = {}
        self._answers: dict[
            tuple[int, frozenset[str] | None, ValueSet | None, ValueSet | None], tuple[list[Option], list[Option]]
        ] = {}  # each answer keeps the list it was asked about alive, so its id is never reused
        self._derived: dict[int, tuple[list[Option], dict[str, Decimal], frozenset[str]]] = {}

    def allowed(self, requirements: Requirements) -> frozenset[str] | None:
        """Names of the types whose labels these requirements allow; None: all of them."""
        relevant = tuple(sorted((v for k, v in requirements.items() if k in self.label_keys), key=lambda v: v.key))
        if not relevant:
            return None
        names = self._allowed.get(relevant)
        if names is None:
            wanted = Requirements(relevant)
            names = frozenset(it.name for it in self.catalog if not it.requirements.intersects(wanted))
            self._allowed[relevant] = names
        return names

    def __call__(self, options: list[Option], requirements: Requirements) -> list[Option]:
        """The options whose type and offers the requirements allow."""
        names = self.allowed(requirements)
        zones, types = requirements.get(ZONE_LABEL), requirements.get(CAPACITY_TYPE_LABEL)
        key = (id(options), names, zones, types)
        hit = self._answers.get(key)
        if hit is not None and hit[0] is options:
            return hit[1]
        fitting = [o for o in options if names is None or o.instance.name in names]
        if zones is not None or types is not None:
            cache = self._narrowed.setdefault((zones, types), {})
            out = []
            for option in fitting:
                narrowed = cache.get(id(option), option)
                if narrowed is option and id(option) not in cache:
                    narrowed = cache[id(option)] = _narrow(option, zones, types)
                if narrowed is not None:
                    out.append(narrowed)
            fitting = out
        self._answers[key] = (options, fitting)
        self.derived(fitting)
        return fitting

    def derived(self, options: list[Option]) -> tuple[dict[str, Decimal], frozenset[str]]:
        """The largest room per resource and the zones of a list of options."""
        known = self._derived.get(id(options))
        if known is None or known[0] is not options:
            zones = frozenset().union(*(o.zones for o in options)) if options else frozenset()
            known = self._derived[id(options)] = (options, _largest(options), zones)
        return known[1], known[2]


def _narrow(option: Option, zones: ValueSet | None, types: ValueSet | None) -> Option | None:
    offers = tuple(
        o
        for o in option.offers
        if (zones is None or zones.has(o.zone)) and (types is None or types.has(o.capacity_type))
    )
    if not offers:
        return None
    return option if offers == option.offers else Option(option.instance, offers, option.room)


def _with(used: Mapping[str, Decimal], pod: PendingPod) -> dict[str, Decimal]:
    out = dict(used)
    for name, value in pod.requests.items():
        out[name] = out.get(name, _ZERO) + value
    out["pods"] = out.get("pods", _ZERO) + 1
    return out


def _add_to_claim(
    pod: PendingPod, claim: PlannedClaim, topology: Topology, zones: list[str] | None, fitting: _Fitting
) -> bool:
    if claim.taints and _tolerated(pod.tolerations, claim.taints) is not None:
        return False
    if pod.requirements and claim.requirements.compatible(pod.requirements):
        return False
    used = _with(claim.used, pod)
    if not pod.requirements and (zones is None or _pinned_to(claim, zones)):  # only room matters
        if not claim.holds(used) or not _min_values_met(claim.requirements, claim.options, used):
            return False
        claim.used = used
        claim.pods.append(pod.key)
        return True
    merged = Requirements(claim.requirements.values())
    for key in pod.requirements:
        merged.add(pod.requirements[key])
    if not _pin(merged, zones, claim.zone_set):
        return False
    options = fitting(claim.options, merged)
    if not any(o.holds(used) for o in reversed(options)) or not _min_values_met(merged, options, used):
        return False
    claim.requirements, claim.used = merged, used
    claim.narrowed(options, fitting)
    claim.pods.append(pod.key)
    return True


def _new_claim(
    pod: PendingPod,
    pool: PoolTemplate,
    pool_options_: list[Option],
    remaining: dict[str, dict[str, Decimal] | None],
    plan: Plan,
    zones: list[str] | None,
    fitting: _Fitting,
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
    options = fitting(candidates, merged)  # the ones too small drop out as pods are added, or at the end
    if not any(o.holds(used) for o in reversed(options)):
        wanted = sorted(map(str, merged.values()))
        return f"no instance type satisfied resources {_shown(pod.requests)} and requirements {wanted}"
    if not _min_values_met(merged, options, used):
        return "no instance type satisfied requirements due to minValues incompatibility"
    if left is not None:  # reserve the largest candidate that holds the pod, and one node, at once
        holding = [o for o in options if o.holds(used)]
        for name in left:
            if name == NODES_RESOURCE:
                left[name] -= 1
            else:
                left[name] -= max(o.instance.capacity.get(name, _ZERO) for o in holding)
    claim = PlannedClaim(f"claim-{len(plan.claims)}", pool.name, merged, options, [pod.key], used, taints=pool.taints)
    claim.narrowed(options, fitting)
    plan.claims.append(claim)
    return None


def _min_values_met(requirements: Requirements, options: Iterable[Option], used: Mapping[str, Decimal]) -> bool:
    """Strict minValues (the default): every requirement that asks for N distinct values of
    its label has them among the types that still hold the claim's pods."""
    asked = [(key, v.min_values) for key, v in requirements.items() if v.min_values]
    if not asked:
        return True
    holding = [o for o in options if o.holds(used)]
    return all(len({o.instance.labels.get(key) for o in holding} - {None}) >= n for key, n in asked)


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
