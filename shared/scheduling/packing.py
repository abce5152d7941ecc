"""One scheduling pass (upstream's `pkg/controllers/provisioning/scheduling/scheduler.go`): pending
pods onto existing capacity, onto NodeClaims planned in this pass, or onto new NodeClaims of the
first NodePool that fits.

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
- A pod finds its node and claim through indexes (`existing`, `candidates`) that keep this
  order but pass over what cannot take it, so a pass costs near-linearly in its pods; the plan
  is the one the pass made trying each in turn (checked against that pass in the tests).
- Soft terms (preferred affinity, ScheduleAnyway spread, PreferNoSchedule taints when a pool or
  node has one) are tried as requirements first; a pod that cannot be placed so gives them up
  one at a time and is tried again (`preferences.relax`). `minValues` is strict, or BestEffort:
  a new claim lowers what its types cannot meet and says so.
- A `Bound` (the caller's deadline and clock) stops the pass early: what is planned stands, the
  pods not looked at are `Plan.deferred` to the next pass (those it ignores are ignored still).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from shared.api.core import Operator, TaintEffect
from shared.api.labels import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodepool import NODES_RESOURCE
from shared.scheduling.candidates import ClaimIndex
from shared.scheduling.existing import NodeIndex
from shared.scheduling.fitting import Fitting
from shared.scheduling.offerings import (
    DaemonSetPods,
    InstanceOption,
    Option,
    UnavailableOfferings,
    pool_options,
)
from shared.scheduling.preferences import relax
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.rules import MinValuesPolicy, met_min_values, min_values_met, pin, tolerated, with_pod
from shared.scheduling.topology import Running, Topology
from shared.scheduling.values import Bound, NodeCapacity, PendingPod, Plan, PlannedClaim, PoolTemplate

_ZERO = Decimal(0)


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
    bound: Bound | None = None,
    pool_catalogs: Mapping[str, Sequence[InstanceOption]] | None = None,
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT,
) -> Plan:
    """`running`: the pods already running, for the topology rules (`topology.Running`);
    `options`: `option_table`'s answer for these pools, when the caller plans many times over
    the same pools and catalog (a consolidation's simulations); `bound`: when to stop (upstream
    gives a pass a minute), after which the pods not looked at wait in `Plan.deferred`;
    `pool_catalogs`: a pool's own catalog where its node class changes the types' allocatable
    (`option_table`); `min_values_policy`: upstream's (BestEffort lowers a minValues a new
    claim cannot meet, and marks the claim)."""
    plan = Plan()
    topology = Topology(running)
    queue = sorted(pods, key=_queue_order)
    smallest = _smallest(queue)
    existing = NodeIndex(sorted((n.copy() for n in nodes), key=lambda n: (not n.initialized, n.name)))
    ordered_pools = _ordered(pools)
    remaining = {p.name: dict(p.remaining) if p.remaining is not None else None for p in ordered_pools}
    if options is None:
        options = option_table(
            ordered_pools, catalog, daemonsets=daemonsets, unavailable=unavailable, now=now, pool_catalogs=pool_catalogs
        )
    known_zones = {z for n in existing.nodes if (z := n.labels.get(ZONE_LABEL))} | {
        offer.zone for pool_options_ in options.values() for o in pool_options_ for offer in o.offers
    }
    fitting = Fitting(catalog)
    claims = ClaimIndex(fitting, smallest)
    soft_taints = _prefer_no_schedule(ordered_pools, existing.nodes)
    best_effort = min_values_policy == MinValuesPolicy.BEST_EFFORT
    for position, pod in enumerate(queue):
        # at least one pod a pass: a bound already over (a deadline spent on the pools' options,
        # a timeout of 0) must not leave every pass empty and the queue stuck
        if position > 0 and bound is not None and bound.over(position):
            rest = queue[position:]  # the ones the pass leaves alone are ignored, as ever, not deferred
            plan.ignored += [p.key for p in rest if _left_alone(p)]
            plan.deferred = [p.key for p in rest if not _left_alone(p)]
            break
        if _left_alone(pod):
            plan.ignored.append(pod.key)
            continue
        if soft_taints:
            pod = replace(pod, avoid_prefer_no_schedule=True)
        why = _place(
            pod, plan, topology, known_zones, existing, claims, ordered_pools, options, remaining, fitting, best_effort
        )
        while why is not None and (pod.preferences is not None or pod.avoid_prefer_no_schedule):
            relaxed = relax(pod)  # one soft term less, and try again (upstream's trySchedule)
            if relaxed is None:
                break
            pod = relaxed[0]
            why = _place(
                pod,
                plan,
                topology,
                known_zones,
                existing,
                claims,
                ordered_pools,
                options,
                remaining,
                fitting,
                best_effort,
            )
        if why is not None:
            plan.unplaced[pod.key] = why
    for claim in plan.claims:
        claim.settle()
    return plan


def _place(
    pod: PendingPod,
    plan: Plan,
    topology: Topology,
    known_zones: set[str],
    existing: NodeIndex,
    claims: ClaimIndex,
    ordered_pools: list[PoolTemplate],
    options: Mapping[str, list[Option]],
    remaining: dict[str, dict[str, Decimal] | None],
    fitting: Fitting,
    best_effort: bool,
) -> str | None:
    """The pod onto an existing node, a claim of this pass, or a new claim (recorded in the
    plan and the topology); None when placed, else why not, in upstream's words. A pod that is
    not placed leaves nothing behind, so it may be tried again relaxed."""
    zones = _zones_for(pod, topology, known_zones)
    blocked = topology.blocker(pod.topology)
    node = existing.take(pod, blocked, zones)
    if node is not None:
        plan.placed[pod.key] = node.name
        topology.record(pod.topology, node.labels.get(ZONE_LABEL), node.name)
        return None
    claim = claims.take(pod, blocked, zones)
    if claim is None:
        reasons = []
        for pool in ordered_pools:
            why = _new_claim(pod, pool, options[pool.name], remaining, plan, zones, fitting, best_effort)
            if why is None:
                claim = plan.claims[-1]
                claims.add(claim)
                break
            reasons.append(f'incompatible with nodepool "{pool.name}", {why}')
        else:
            return "; ".join(reasons) or "no nodepool is ready"
    pinned = claim.requirements.get(ZONE_LABEL)
    zone = next(iter(pinned.values)) if pinned is not None and len(pinned) == 1 else None
    topology.record(pod.topology, zone, claim.id)
    return None


def _prefer_no_schedule(pools: Sequence[PoolTemplate], nodes: Sequence[NodeCapacity]) -> bool:
    """Whether a pool or node carries a PreferNoSchedule taint: pods then keep off them until
    relaxed (upstream offers that step when a pool has one; a node's counts here too, so a pod
    is never kept off a node it could take)."""
    return any(t.effect == TaintEffect.PREFER_NO_SCHEDULE for p in pools for t in p.taints) or any(
        t.effect == TaintEffect.PREFER_NO_SCHEDULE for n in nodes for t in n.taints
    )


def _smallest(pods: Sequence[PendingPod]) -> dict[str, Decimal]:
    """The least cpu and memory a pod of the batch asks for (a resource some pod does not ask
    for is left out): a claim without that much room is done for the pass."""
    out: dict[str, Decimal] = {}
    for name in ("cpu", "memory"):
        values = [p.requests.get(name) for p in pods]
        if values and all(v is not None for v in values):
            out[name] = min(v for v in values if v is not None)
    return out


def _zones_for(pod: PendingPod, topology: Topology, known: set[str]) -> list[str] | None:
    """For a pod with zone rules, the zones they allow, best first; None when it has none."""
    if not pod.topology.zonal:
        return None
    wanted = pod.requirements.get(ZONE_LABEL)
    return topology.zones_allowed(pod.topology, (z for z in known if wanted is None or wanted.has(z)))


def _ordered(pools: Iterable[PoolTemplate]) -> list[PoolTemplate]:
    """By weight, then name descending (upstream's order), each with its pool label required."""
    ordered = sorted(pools, key=lambda p: (-p.weight, _descending(p.name)))
    return [replace(p, requirements=with_pool_label(p)) for p in ordered]


def option_table(
    pools: Iterable[PoolTemplate],
    catalog: Sequence[InstanceOption],
    *,
    daemonsets: Sequence[DaemonSetPods] = (),
    unavailable: UnavailableOfferings | None = None,
    now: datetime | None = None,
    pool_catalogs: Mapping[str, Sequence[InstanceOption]] | None = None,
) -> dict[str, list[Option]]:
    """Each pool's launchable options, as a pass computes them: the costly part of a pass over
    few pods, so many passes over the same pools and catalog compute it once. A pool named in
    `pool_catalogs` launches from its own: the same types and offerings, with the capacity and
    allocatable its node class's kubelet settings give them (upstream asks the cloud provider
    for each NodePool's instance types)."""
    found: dict[str, list[Option]] = {}
    own = pool_catalogs or {}
    for pool in pools:
        requirements = with_pool_label(pool)
        found[pool.name] = pool_options(
            requirements,
            pool.taints,
            own.get(pool.name, catalog),
            daemonsets=daemonsets,
            unavailable=unavailable,
            now=now,
        )
    return found


def with_pool_label(pool: PoolTemplate) -> Requirements:
    """The template's requirements and `karpenter.sh/nodepool=<name>`, as upstream's template has."""
    out = Requirements(pool.requirements.values())
    out.add(ValueSet.exactly(NODEPOOL_LABEL, pool.name))
    return out


def _queue_order(pod: PendingPod) -> tuple[Decimal, Decimal, str, str]:
    created = pod.created_at.isoformat() if pod.created_at else ""
    return (-pod.requests.get("cpu", _ZERO), -pod.requests.get("memory", _ZERO), created, pod.uid or pod.key)


def _descending(name: str) -> tuple[int, ...]:
    return (*(-ord(ch) for ch in name), 1)  # the 1 ends a name after any longer name it begins


def _left_alone(pod: PendingPod) -> bool:
    """A DaemonSet's pod, or one that asks for no NodePool: upstream leaves them alone too."""
    wanted = pod.requirements.get(NODEPOOL_LABEL)
    return pod.daemonset or (wanted is not None and wanted.operator == Operator.DOES_NOT_EXIST)


def _new_claim(
    pod: PendingPod,
    pool: PoolTemplate,
    pool_options_: list[Option],
    remaining: dict[str, dict[str, Decimal] | None],
    plan: Plan,
    zones: list[str] | None,
    fitting: Fitting,
    best_effort: bool = False,
) -> str | None:
    """Plan a new claim of `pool` for the pod, or say why it cannot."""
    why = tolerated(pod.tolerations, pool.taints, pod.avoid_prefer_no_schedule)
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
    if not pin(merged, zones, (offer.zone for o in candidates for offer in o.offers)):
        return "no zone satisfies the pod's topology rules"
    used = with_pod({}, pod)
    options = fitting(candidates, merged)  # the ones too small drop out as pods are added, or at the end
    if not any(o.holds(used) for o in reversed(options)):
        wanted = sorted(map(str, merged.values()))
        return f"no instance type satisfied resources {_shown(pod.requests)} and requirements {wanted}"
    relaxed = False
    if not min_values_met(merged, options, used):
        if not best_effort:
            return "no instance type satisfied requirements due to minValues incompatibility"
        merged, relaxed = met_min_values(merged, options, used), True
    if left is not None:  # reserve the largest candidate that holds the pod, and one node, at once
        holding = [o for o in options if o.holds(used)]
        for name in left:
            if name == NODES_RESOURCE:
                left[name] -= 1
            else:
                left[name] -= max(o.instance.capacity.get(name, _ZERO) for o in holding)
    claim = PlannedClaim(f"claim-{len(plan.claims)}", pool.name, merged, options, [pod.key], used, taints=pool.taints)
    claim.min_values_relaxed = relaxed
    claim.narrowed(options, fitting)
    plan.claims.append(claim)
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
