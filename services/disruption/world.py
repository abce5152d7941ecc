"""The disruption projection and the live counters as the pure pass takes them (`World`), and
what a pass judges of each claim for its NodeClaim object (`judgments`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal

from services.disruption.projection import Claim, Pod, Projection
from shared.api.labels import DELETION_COST_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION
from shared.api.nodepool import ConsolidationPolicy, DisruptionReason, NodePool
from shared.disruption.balanced import PoolTotals, node_disruption_cost
from shared.disruption.candidates import CandidatePod, NodeState
from shared.disruption.cloud_drift import CLOUD_REASONS, Launch
from shared.disruption.consolidatable import consolidatable_at
from shared.disruption.drift import drift_reason
from shared.disruption.pdbs import Member, disruptions_allowed
from shared.disruption.repair import READY, Condition, RepairPolicy
from shared.disruption.simulation import ClusterView, Movable, Move
from shared.disruption.world import Node, PoolRules, World
from shared.kube.nodeclaims import Judgment
from shared.policy.counters import PoolCounters
from shared.policy.limits import NodeLimit, remaining_resources
from shared.policy.overlimit import ClaimFacts
from shared.policy.pods import PodFacts, eviction_cost
from shared.runtime.catalogs import Loaded
from shared.scheduling.nodeclasses import class_of
from shared.scheduling.offerings import InstanceOption
from shared.scheduling.requirements import Requirements
from shared.scheduling.rules import MinValuesPolicy
from shared.termination.pods import DISRUPTED_TAINT, tolerations_of


def build(
    projection: Projection,
    counters: Mapping[str, PoolCounters],
    loaded: Loaded,
    now: datetime,
    *,
    spot_to_spot: bool = False,
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT,
    judging: Collection[str] = (),
    repair_policies: Sequence[RepairPolicy] = (),
    static_capacity: bool = False,
) -> World:
    """`loaded`: the instance types, and the pools that launch from their class's own;
    `judging`: the decisions of the command being re-checked, whose own candidates are its to
    judge, not going."""
    catalog = loaded.catalog
    others = [command for command in projection.live_commands() if command.decision_id not in judging]
    going = {c for command in others for c in command.candidates}
    busy = {c.nodepool for c in others if not c.forceful}
    balanced = {
        name
        for name, pool in projection.pools.items()
        if pool.spec.disruption.consolidation_policy == ConsolidationPolicy.BALANCED
    }
    totals: dict[str, list[float]] = {name: [0.0, 0.0] for name in balanced}  # cost an hour, disruption
    # a claim's price and capacity are its pool's catalog's (a NodeOverlay may change them per pool)
    figures = {pool: _figures(options) for pool, options in loaded.pools.items()}
    default = _figures(catalog)
    view = projection.view
    # the pools a replacement may go to (not one whose class is not Ready), with what their limits leave
    left = {name: _left(row) for name, row in counters.items()}
    templates = tuple(view.templates(left))
    static_pools = tuple(t for t in view.templates(left, static=True) if projection.pools[t.name].spec.static)
    # drift compares each claim with its pool, ready or not: requirements and template labels
    wanted = {t.name: t.requirements for t in view.templates({}, unready=True, static=True)}
    nominated = set(projection.view.nominated.values()) | _awaited(projection)
    nodes = []
    leaving: set[str] = set()
    for name, claim in projection.claims.items():
        deleting = claim.deleting or name in going
        if deleting:
            leaving.update(n for n in (name, claim.node) if n)
        pods = projection.pods_on(claim.node)
        seen = tuple(_candidate_pod(p) for p in pods)
        state = NodeState(
            nodeclaim=name,
            nodepool=claim.nodepool,
            node=claim.node,
            initialized=claim.initialized_at is not None and claim.node is not None,
            deleting=deleting,
            nominated=name in nominated,
            do_not_disrupt=claim.do_not_disrupt,
            pods=seen,
            grace_period=claim.grace_period,
        )
        # its class's own catalog (AWS), else the cloud's (the sim's): a type gone is InstanceTypeNotFound
        drift, drifted_since = _drift(projection, claim, wanted, loaded.pools.get(claim.nodepool) or catalog, now)
        prices, capacities = figures.get(claim.nodepool, default)
        facts = _facts(name, claim, pods, deleting)
        disruption = 1.0
        if claim.nodepool in balanced:  # every node of the pool counts, candidate or not (upstream's totals)
            disruption = node_disruption_cost(
                eviction_cost(f) for f, c in zip(facts.pods, seen, strict=True) if c.reschedulable
            )
            pool_totals = totals[claim.nodepool]
            pool_totals[0] += _price(claim, prices)
            pool_totals[1] += disruption
        nodes.append(
            Node(
                state=state,
                facts=facts,
                initialized_at=claim.initialized_at,
                last_pod_event=claim.last_pod_event,
                movable=_movable(
                    name,
                    claim,
                    [p for p, c in zip(pods, seen, strict=True) if c.reschedulable],
                    prices,
                    capacities,
                    disruption,
                ),
                drift=drift,
                drifted_since=drifted_since,
                conditions=_conditions(claim),
            )
        )
    pools = {
        name: _rules(
            name,
            pool,
            counters.get(name),
            now,
            name in busy,
            PoolTotals(*totals[name]) if name in totals else None,
        )
        for name, pool in projection.pools.items()
        if name in counters
    }
    cluster = ClusterView(
        nodes=tuple(n for n in view.capacity() if n.name not in leaving),
        pools=templates,
        catalog=tuple(catalog),
        pool_catalogs={pool: tuple(options) for pool, options in loaded.pools.items()},
        daemonsets=tuple(view.daemonsets.values()),
        pending=tuple(view.plannable()),
        running=tuple(view.running()),
        now=now,
        min_values_policy=min_values_policy,
        static_pools=static_pools,
    )
    pdbs = list(projection.pdbs.values())
    allowed = {
        pdb.key: disruptions_allowed(
            pdb,
            [Member(p.node is not None) for p in projection.all_pods() if pdb.selects(p.namespace, p.labels)],
        )
        for pdb in pdbs
    }
    validating = any(not command.forceful and command.kept is None for command in others)
    return World(
        now,
        pools,
        nodes,
        cluster,
        pdbs,
        allowed,
        spot_to_spot,
        repair_policies=tuple(repair_policies),
        validating=validating,
        static_capacity=static_capacity,
    )


def _drift(
    projection: Projection,
    claim: Claim,
    wanted: Mapping[str, Requirements],
    catalog: Sequence[InstanceOption],
    now: datetime,
) -> tuple[str | None, datetime]:
    """Why the claim is drifted (None: it is not), and since when: its pool's last change, or for
    a reason its class gives, when what the class resolves to last changed."""
    since = max(claim.created_at, projection.applied_at.get(claim.nodepool, claim.created_at))
    if claim.nodepool not in wanted:
        return None, since
    pool = projection.pools.get(claim.nodepool)
    nodeclass = class_of(pool) if pool is not None else None
    drift = drift_reason(
        launched=claim.launched,
        claim=claim.stamp,
        pool=projection.stamps[claim.nodepool],
        claim_labels=claim.labels,
        pool_requirements=wanted[claim.nodepool],
        launch=_launch(claim),
        nodeclass=projection.view.nodeclasses.get(nodeclass or ""),
        catalog=catalog,
        now=now,
    )
    if drift in CLOUD_REASONS and nodeclass in projection.resolved_at:
        since = max(claim.created_at, projection.resolved_at[nodeclass])
    return drift, since


def _launch(claim: Claim) -> Launch:
    return Launch(
        claim.created_at,
        claim.instance_type,
        claim.zone,
        claim.capacity_type,
        claim.image_id,
        claim.subnet_id,
        claim.security_group_ids,
    )


def _awaited(projection: Projection) -> set[str]:
    """Replacements whose command's candidates are still there: their pods are on their way to
    them, so they are as good as nominated (upstream records the nominations when it starts)."""
    out: set[str] = set()
    for command in projection.commands.values():
        if not command.replacements:
            continue
        if any(name in projection.claims for name in command.kept or command.candidates):
            out.update(command.replacements)
    return out


def _rules(
    name: str, pool: NodePool, row: PoolCounters | None, now: datetime, busy: bool, balanced: PoolTotals | None
) -> PoolRules:
    nodes = row.initialized if row is not None else 0
    disrupting = len(row.disrupting) if row is not None else 0
    policy = row.policy() if row is not None else None
    budgets = policy.budgets if policy is not None else None
    allowed: dict[str, int | None] = {}
    remaining: dict[str, int | None] = {}
    if budgets is not None:
        status = budgets.status(now, nodes, disrupting)
        for reason in DisruptionReason:
            allowed[reason], remaining[reason] = status.allowed(reason), status.remaining(reason)
    disruption = pool.spec.disruption
    return PoolRules(
        name=name,
        consolidate_after=disruption.consolidate_after_timedelta,
        when_empty=disruption.consolidation_policy == ConsolidationPolicy.WHEN_EMPTY,
        nodes=nodes,
        allowed=allowed,
        remaining=remaining,
        node_limit=NodeLimit.of(pool, row.nodes if row is not None else 0),
        busy=busy,
        balanced=balanced,
        replicas=pool.spec.replicas,
    )


def reschedulable_on(projection: Projection, node: str | None) -> int:
    """The pods on the node that would need a place elsewhere were it to go (DaemonSet and mirror
    pods would not): upstream's count for `karpenter_pods_disruption_initiated_total`."""
    return sum(1 for pod in projection.pods_on(node) if _candidate_pod(pod).reschedulable)


def _candidate_pod(pod: Pod) -> CandidatePod:
    return CandidatePod(
        namespace=pod.namespace,
        name=pod.name,
        labels=pod.labels,
        owner_kind=pod.owner_kind,
        do_not_disrupt=pod.annotations.get(DO_NOT_DISRUPT_ANNOTATION),
        started_at=pod.started_at,
        tolerates_disrupted=any(t.tolerates(DISRUPTED_TAINT) for t in tolerations_of(pod.tolerations)),
    )


def _facts(name: str, claim: Claim, pods: Sequence[Pod], deleting: bool) -> ClaimFacts:
    return ClaimFacts(
        name=name,
        launched=claim.launched,
        created_at=claim.created_at,
        expire_after=claim.expire_after,
        pods=tuple(
            PodFacts(
                p.key,
                daemonset=p.owner_kind == "DaemonSet",
                do_not_disrupt=p.annotations.get(DO_NOT_DISRUPT_ANNOTATION),
                start_time=p.started_at,
                priority=p.priority,
                deletion_cost=p.annotations.get(DELETION_COST_ANNOTATION),
            )
            for p in pods
        ),
        deleting=deleting,
    )


def _left(row: PoolCounters) -> dict[str, Decimal] | None:
    """What the pool's limits leave now, every claim counted (None: it has none)."""
    policy = row.policy()
    if policy is None or not policy.limits:
        return None
    return remaining_resources(policy.limits, row.usage())


def _movable(
    name: str,
    claim: Claim,
    moving: Sequence[Pod],
    prices: Mapping[tuple[str, str, str], float],
    capacities: Mapping[str, Mapping[str, Decimal]],
    disruption: float,
) -> Movable | None:
    """`moving`: its pods that need a place elsewhere if it goes; `capacities`: each type's, what
    the claim holds of its pool's limits; `disruption`: its cost as Balanced weighs it."""
    if claim.node is None or not claim.instance_type or not claim.zone or not claim.capacity_type:
        return None
    price = prices.get((claim.instance_type, claim.zone, claim.capacity_type))
    if price is None:
        return None
    return Movable(
        Move(
            name,
            claim.node,
            tuple(p.pending() for p in moving),
            claim.nodepool,
            capacities.get(claim.instance_type, {}),
        ),
        claim.nodepool,
        price,
        claim.capacity_type,
        claim.instance_type,
        disruption,
    )


def _figures(
    catalog: Iterable[InstanceOption],
) -> tuple[dict[tuple[str, str, str], float], dict[str, Mapping[str, Decimal]]]:
    """Each offering's price and each type's capacity in one catalog."""
    options = list(catalog)
    prices = {(o.name, offer.zone, offer.capacity_type): offer.price for o in options for offer in o.offers}
    return prices, {o.name: o.capacity for o in options}


def _price(claim: Claim, prices: Mapping[tuple[str, str, str], float]) -> float:
    """What the claim costs an hour by its offer (0 until launched, or once its type is gone)."""
    if not claim.instance_type or not claim.zone or not claim.capacity_type:
        return 0.0
    return prices.get((claim.instance_type, claim.zone, claim.capacity_type), 0.0)


def judgments(world: World) -> dict[str, Judgment]:
    """Each claim's `Drifted` and `Consolidatable` as upstream's nodeclaim disruption controllers
    mark them at this instant: drifted once launched and no longer matching its pool;
    Consolidatable once initialized and consolidateAfter has passed since its last pod event (or
    its initialization), never under `Never`."""
    out = {}
    for node in world.nodes:
        rules = world.pools.get(node.state.nodepool)
        since = None
        if rules is not None and node.initialized_at is not None:
            at = consolidatable_at(rules.consolidate_after, node.initialized_at, node.last_pod_event)
            since = at if at is not None and at <= world.now else None
        drifted_since = node.drifted_since if node.drift else None
        out[node.state.nodeclaim] = Judgment(node.drift, drifted_since, since, node.last_pod_event)
    return out


def _conditions(claim: Claim) -> tuple[Condition, ...]:
    """Its node's conditions that are not healthy: Ready's, then the agent's by name."""
    ready = (Condition(READY, *claim.not_ready),) if claim.not_ready else ()
    return ready + tuple(Condition(kind, *claim.conditions[kind]) for kind in sorted(claim.conditions))
