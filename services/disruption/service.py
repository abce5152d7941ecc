"""Disruption: finds nodes to remove (expiration, removal above a lowered node limit, emptiness,
drift, consolidation) and carries each command out safely.

It follows the log into its projection like the scheduler, and like it one replica leads (a
PostgreSQL advisory lock, every append fenced) while the others keep warm. A pass builds the
pure `World` and asks `shared.disruption.passes`; each command found is reserved with
`reserve_disruption` (budgets at that instant, the node hard limit), and a refusal is said as
`DisruptionBlocked`. Commands then move through their own stream, each step expecting the
stream's version so two leaders never both act (`commands.py`). Each pass's judgments, and the
decisions in the log, are written on the NodeClaim API objects (`shared.runtime.nodeclaims`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from services.disruption.commands import Commands
from services.disruption.metrics import DisruptionMetrics
from services.disruption.projection import PROJECTED, Projection
from services.disruption.world import build, judgments
from shared import acts
from shared.api.nodepool import DisruptionReason
from shared.bus.connection import BusSettings
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell, database_answers
from shared.clock import Clock
from shared.disruption.candidates import UNSCHEDULABLE, Blocked
from shared.disruption.command import Command
from shared.disruption.method import Found
from shared.disruption.passes import BUDGET, NODE_HARD_LIMIT, PoolBlocked, forceful, graceful, repair
from shared.disruption.repair import REPAIR_BLOCKED, REPAIR_BLOCKED_MESSAGE, UNHEALTHY
from shared.disruption.world import World
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.kube.nodeclaims import READS, NodeClaimRecords
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import blocked_by_node_limit_message
from shared.policy.violations import BudgetExceeded, NodeLimitExceeded, ReservationError
from shared.ports.cloud import CloudProvider
from shared.ports.cluster import NODE, NODECLAIM, NODEPOOL, NORMAL, WARNING, Cluster, KubeEvent
from shared.runtime import logs
from shared.runtime.catalogs import Catalogs, Loaded
from shared.runtime.gates import record_gates
from shared.runtime.leading import lead, quiet
from shared.runtime.ledger import Ledger
from shared.runtime.nodeclaims import NodeClaimWriter
from shared.runtime.recorder import Recorder
from shared.scheduling.claims import claim_name
from shared.scheduling.rules import MinValuesPolicy
from shared.store.eventstore import EventStore, NotLeader, unit
from shared.store.leader import LeaderLock

PRODUCER = "disruption"
LEADER_LOCK = 0x6E77_6469_7372  # "nwdisr"
POLL = timedelta(seconds=10)
"""Upstream's disruption loop looks every 10 s, and at once after it acted."""
POOL_SAID_EVERY = timedelta(minutes=1)
NODE_SAID_EVERY = timedelta(minutes=2)
UNCONSOLIDATABLE = "Unconsolidatable"
UNCONSOLIDATABLE_SAID_EVERY = timedelta(minutes=15)
REPAIR_BLOCKED_SAID_EVERY = timedelta(minutes=15)
"""Upstream's `NodeRepairBlocked` dedupe timeout."""
_IDS = uuid.UUID("6c1a1f0e-8d0b-4a55-9f43-646973727570")
log = logs.controller("disruption")


class DisruptionService:
    def __init__(
        self,
        store: EventStore,
        cloud: CloudProvider,
        clock: Clock,
        bus: BusSettings | str,
        *,
        port: int = 0,
        cluster: Cluster | None = None,
        spot_to_spot: bool = False,
        min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT,
        poll: timedelta = POLL,
        nodeclasses: bool = False,
        node_repair: bool = False,
        static_capacity: bool = False,
        gates: Mapping[str, bool] | None = None,
    ) -> None:
        """`nodeclasses`: the cloud resolves EC2NodeClasses (AWS), so no replacement is planned
        into a pool whose class is not Ready (the scheduler's gate, as the simulation sees it);
        `static_capacity`: the `StaticCapacity` gate: static pools are scaled down to their replicas;
        `gates`: every known feature gate as the process read them, recorded when it starts
        leading (`FeatureGatesObserved`) so explain and the what-if replay by them (None: not
        recorded, as the offline runner, which takes no lead, does not)."""
        self.store, self.cloud, self.clock = store, cloud, clock
        self.spot_to_spot, self.poll = spot_to_spot, poll
        self.static_capacity = static_capacity
        self.gates = dict(gates) if gates is not None else None
        self.repair_policies = tuple(cloud.repair_policies()) if node_repair else ()
        """The cloud's repair policies while the `NodeRepair` gate is on (upstream: node repair
        runs only when the gate is on and the provider declares policies)."""
        self.min_values_policy = min_values_policy
        self.recorder = Recorder(cluster, window=timedelta(0))  # `_say` decides what is said, and when
        self.published: dict[tuple[str, str, str], datetime] = {}  # DisruptionBlocked -> last Event
        self.projection = Projection()
        self.projection.view.gated = nodeclasses
        self.catalogs = Catalogs(cloud)
        self.loaded = Loaded()
        self.lock = LeaderLock(store, LEADER_LOCK)
        self.shell = ServiceShell(PRODUCER, bus, port=port, readiness=[database_answers(store)])
        self.claim_records = NodeClaimRecords()
        self.objects = NodeClaimWriter(cluster, self.claim_records)  # Drifted, Consolidatable, DisruptionReason
        self.consumer = ProjectionConsumer(
            self.shell,
            store,
            lambda event: (self.projection.apply(event), self.claim_records.apply(event)),
            validate=PROJECTED | READS,
        )
        self.ledger = Ledger(store, self.lock, self.consumer, producer=PRODUCER)  # every write while leading
        self.metrics = DisruptionMetrics.on(self.shell.registry)
        self.commands = Commands(
            self.ledger,
            self.projection,
            Recorder(cluster),  # progress events: upstream's 2-minute dedupe
            catalog=lambda: self.loaded,
            spot_to_spot=spot_to_spot,
            min_values_policy=min_values_policy,
            metrics=self.metrics,
        )
        self.last_pass: datetime | None = None

    async def run(self, stopping: asyncio.Event) -> None:
        """Follow the bus from the start; lead while holding the lock, as the scheduler does."""
        await self.shell.start(stopping)
        try:
            await lead(self.lock, self.metrics.leader, stopping, self._take_over, self._follow, log)
        finally:
            await self.objects.stop()
            await self.shell.stop()

    async def _take_over(self) -> None:
        await self.ledger.take_over()
        if self.gates is not None:  # before any decision: the log says what they were taken under
            await record_gates(self.ledger, PRODUCER, self.gates, self.clock.now(), producer=PRODUCER, log=log)
        await self.objects.restart()
        await self._load_catalog()  # a command inherited mid-way is re-checked before the first pass

    async def _load_catalog(self) -> None:
        """The instance types and prices, per node class, refreshed: a re-check without them
        finds no move for any pod."""
        self.loaded = await self.catalogs.load(self.projection.view)

    async def _follow(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.ledger.check()
            now = self.clock.now()
            acted = await self.commands.progress(now)
            if acted or self.last_pass is None or now - self.last_pass >= self.poll:
                self.last_pass = now
                await self.disrupt(now)
            await self.ledger.reach()
            await quiet(self.consumer, stopping)

    async def disrupt(self, now: datetime) -> list[str]:
        """One pass: the forceful commands of every pool, then the first graceful method that
        finds one; each reserved or said blocked. The decision ids recorded."""
        await self._load_catalog()
        counters = await self.store.counters()
        world = build(
            self.projection,
            counters,
            self.loaded,
            now,
            spot_to_spot=self.spot_to_spot,
            min_values_policy=self.min_values_policy,
            repair_policies=self.repair_policies,
            static_capacity=self.static_capacity,
        )
        found = forceful(world)
        repaired, held = repair(world, {name for f in found for name in f.command.candidates})
        found += repaired
        await self._repair_blocked(held, now)
        result = graceful(world, time.perf_counter)
        for method_reason, consolidation_type, seconds in result.durations:
            self.metrics.evaluation.labels(method_reason.lower(), consolidation_type).observe(seconds)
        for rules in world.pools.values():
            for reason in DisruptionReason:
                allowed = rules.allowed.get(reason)
                self.metrics.allowed.labels(rules.name, reason.value).set(
                    float(allowed) if allowed is not None else 2**31 - 1
                )
                row = counters.get(rules.name)
                self.metrics.consuming.labels(rules.name, reason.value).set(len(row.disrupting) if row else 0)
        for reason, count in result.eligible.items():
            self.metrics.eligible.labels(str(reason).lower()).set(count)
        decided = []
        for command in [*found, *result.found]:
            decision = await self._reserve(command, now, world)
            if decision is not None:
                decided.append(decision)
        if not result.waited:  # a pass that asked no method lifts no block and clears no reason
            await self._say(result.pool_blocked, result.blocked, now, every_pass=True)
            taken = [name for f in (*found, *result.found) for name in f.command.candidates]
            await self._tell_unconsolidatable(result.unconsolidatable, taken, now)
        judged = judgments(world)
        self.objects.kick(lambda: self.objects.keep_judgments(judged, now))  # in the background, after the decisions
        return decided

    async def _reserve(self, found: Found, now: datetime, world: World) -> str | None:
        command = found.command
        decision_id = str(uuid.uuid4())
        pools = [c.nodepool for c in found.new_claims] or [found.nodepool] * command.replacements
        replacements = [claim_name(pool) for pool in pools]  # each named after the pool it goes to
        by_pool = candidates_by_pool(found, world)
        ids = [decision_id] + [str(uuid.uuid4()) for _ in list(by_pool)[1:]]
        text = describe(decision_id, list(by_pool), command)
        parts = [
            c.DisruptionDecided(
                decision_id=part_id,
                nodepool=pool,
                reason=command.reason,
                candidates=candidates,
                replacements=replacements if part_id == decision_id else [],
                replacement_nodepools={n: p for n, p in zip(replacements, pools, strict=True) if p != pool}
                if part_id == decision_id
                else {},
                command_parts=ids if len(ids) > 1 else [],
                forceful=found.forceful,
                command=text,
                decision=command.decision.value,
                consolidation_type=found.consolidation_type,
                savings=found.savings if part_id == decision_id else None,
                score=round(found.scores[pool].value, 4) if pool in found.scores else None,
                observed_position=self.projection.position,
                unhealthy=_evidence(found),
            )
            for part_id, (pool, candidates) in zip(ids, by_pool.items(), strict=True)
        ]
        try:
            await self.ledger.reserve_disruption(parts[0], occurred_at=now, parts=parts[1:])
        except (BudgetExceeded, NodeLimitExceeded) as exc:
            cause = BUDGET if isinstance(exc, BudgetExceeded) else NODE_HARD_LIMIT
            reason = DisruptionReason(command.reason)
            message = blocked_by_budget_message(reason) if cause == BUDGET else blocked_by_node_limit_message(reason)
            refusing = exc.nodepool or found.nodepool
            log.info("nodepool %s: %s not decided: %s", refusing, command.reason, exc)
            await self._say([PoolBlocked(refusing, command.reason, cause, message)], [], now)
            return None
        except ReservationError as exc:
            log.info("nodepool %s: %s not decided: %s", found.nodepool, command.reason, exc)
            return None
        decision, reason_label = command.decision.value, command.reason.lower()
        self.metrics.decisions.labels(decision, reason_label, found.consolidation_type).inc()
        claims = self.projection.claims
        for pool in sorted({claims[n].nodepool for n in command.candidates if n in claims}):
            self.metrics.decisions_by_nodepool.labels(pool, decision, reason_label, found.consolidation_type).inc()
        message, fields = disrupting(decision_id, found, world, self.projection)
        log.info(message, **fields)
        return decision_id

    async def _say(
        self, pools: list[PoolBlocked], nodes: list[Blocked], now: datetime, *, every_pass: bool = False
    ) -> None:
        """`DisruptionBlocked`: in the log once per change (a block begins, or its message
        changes), and as a Kubernetes Event (Normal, as upstream's) while it lasts: on a NodePool
        once a minute per reason and cause, on a node once every two minutes per cause.
        `every_pass`: these are the blocks a pass finds each time (pool budgets at 0, what keeps
        a candidate), so one of those said before and not found now was lifted."""
        said = self.projection.said
        current: dict[tuple[str, str, str], c.DisruptionBlocked] = {}
        for b in pools:
            blocked = c.DisruptionBlocked(nodepool=b.nodepool, reason=b.reason, cause=b.cause, message=b.message)
            current.setdefault((b.nodepool, b.reason, b.cause), blocked)
        for n in nodes:
            claim = self.projection.claims.get(n.nodeclaim)
            if claim is not None:
                blocked = c.DisruptionBlocked(
                    nodepool=claim.nodepool,
                    reason="",
                    cause=n.cause,
                    message=n.message,
                    nodeclaim=n.nodeclaim,
                    node=n.node,
                )
                current.setdefault((n.nodeclaim, "", n.cause), blocked)
        if every_pass:
            for key in [k for k in said if k not in current and _found_every_pass(k)]:
                del said[key]
                self.published.pop(key, None)
        fresh = [(key, e) for key, e in current.items() if said.get(key) != e.message]
        for (key, e), done in zip(fresh, await self._record([e for _, e in fresh], now), strict=True):
            if done:
                said[key] = e.message
        kube = []
        for key, e in current.items():
            every = NODE_SAID_EVERY if e.nodeclaim else POOL_SAID_EVERY
            last = self.published.get(key)
            if (e.node or not e.nodeclaim) and (last is None or now - last >= every):
                self.published[key] = now
                subject = (NODE, e.node) if e.node else (NODEPOOL, e.nodepool)
                kube.append(KubeEvent(*subject, NORMAL, "DisruptionBlocked", e.message))
        await self.recorder.publish(kube, now)

    async def _repair_blocked(self, held: list[tuple[str, str]], now: datetime) -> None:
        """Node repair held back by a pool's unhealthy threshold (upstream's `NodeRepairBlocked`):
        in the log once per node while it lasts (a `DisruptionBlocked` of reason Unhealthy), as
        a Warning on the node every 15 minutes, and counted when it begins."""
        said = self.projection.said
        current = {}
        for name, pool in held:
            claim = self.projection.claims.get(name)
            node = claim.node if claim is not None else None
            blocked = c.DisruptionBlocked(
                nodepool=pool,
                reason=UNHEALTHY,
                cause=REPAIR_BLOCKED,
                message=REPAIR_BLOCKED_MESSAGE,
                nodeclaim=name,
                node=node,
            )
            current[(name, UNHEALTHY, REPAIR_BLOCKED)] = blocked
        for key in [k for k in said if k[1:] == (UNHEALTHY, REPAIR_BLOCKED) and k not in current]:
            del said[key]  # repaired, healthy again, or gone: a later block is said again
            self.published.pop(key, None)
        fresh = [(key, e) for key, e in current.items() if said.get(key) != e.message]
        for (key, e), done in zip(fresh, await self._record([e for _, e in fresh], now), strict=True):
            if done:
                said[key] = e.message
                self.metrics.repair_blocked.labels(e.nodepool).inc()
        kube = []
        for key, e in current.items():
            last = self.published.get(key)
            if e.node and (last is None or now - last >= REPAIR_BLOCKED_SAID_EVERY):
                self.published[key] = now
                kube.append(KubeEvent(NODE, e.node, WARNING, REPAIR_BLOCKED, e.message))
        await self.recorder.publish(kube, now)

    async def _tell_unconsolidatable(self, found: Mapping[str, str], disrupting: Iterable[str], now: datetime) -> None:
        """`Unconsolidatable` (why single-node consolidation keeps a node): in the log when a
        node's reason changes, and as a Normal Kubernetes Event on the node and its claim every
        15 minutes while it lasts (upstream's dedupe). A node a command now takes is no longer
        unconsolidatable: its reason, should it come back, is said again."""
        known = self.projection.unconsolidatable
        for name in disrupting:
            known.pop(name, None)
        fresh, kube = [], []
        for name, message in sorted(found.items()):
            claim = self.projection.claims.get(name)
            if claim is None:
                continue
            told = c.Unconsolidatable(nodepool=claim.nodepool, nodeclaim=name, node=claim.node, message=message)
            if known.get(name) != message:
                fresh.append(told)
            key = (name, "", UNCONSOLIDATABLE)
            last = self.published.get(key)
            if last is None or now - last >= UNCONSOLIDATABLE_SAID_EVERY or known.get(name) != message:
                self.published[key] = now
                kube.append(KubeEvent(NODECLAIM, name, NORMAL, UNCONSOLIDATABLE, message))
                if claim.node:
                    kube.append(KubeEvent(NODE, claim.node, NORMAL, UNCONSOLIDATABLE, message))
        for told, done in zip(fresh, await self._record(fresh, now), strict=True):
            if done:
                known[told.nodeclaim] = told.message
        await self.recorder.publish(kube, now)

    async def _record(self, events: Sequence[c.Event], now: datetime) -> list[bool]:
        """Each event in a unit of its own, fenced; which were recorded. Losing the lead ends
        the pass; another refusal is logged, and the next pass tries again."""
        if not events:
            return []
        units = [unit(e.stream_id, None, [NewEvent.of(e, occurred_at=now, producer=PRODUCER)]) for e in events]
        done = []
        for event, result in zip(events, await self.ledger.append_units(units), strict=True):
            if isinstance(result, NotLeader):
                raise result
            if isinstance(result, BaseException):
                log.warning("%s not recorded: %s", event.TYPE, result)
            done.append(not isinstance(result, BaseException))
        return done


def _evidence(found: Found) -> c.Unhealthy | None:
    """Node repair's evidence, as the decision records it."""
    e = found.unhealthy
    if e is None:
        return None
    seconds = int(e.toleration.total_seconds())
    return c.Unhealthy(condition=e.condition, status=e.status, since=e.since.isoformat(), toleration_seconds=seconds)


def _found_every_pass(key: tuple[str, str, str]) -> bool:
    """A pool's budget at 0 and what keeps a candidate are looked at in every pass; a node limit
    a method met, or a drift whose pods would not schedule, only when that method runs."""
    _, reason, cause = key
    return cause == BUDGET if reason else cause != UNSCHEDULABLE


def candidates_by_pool(found: Found, world: World) -> dict[str, list[str]]:
    """The command's candidates per pool, the found pool first: one decision each."""
    pool_of = {n.state.nodeclaim: n.state.nodepool for n in world.nodes}
    out: dict[str, list[str]] = {found.nodepool: []}
    for name in found.command.candidates:
        out.setdefault(pool_of.get(name, found.nodepool), []).append(name)
    return {pool: names for pool, names in out.items() if names}


def describe(decision_id: str, nodepools: list[str], command: Command) -> str:
    """Upstream's command text: `<Reason>/<id>: <decision>: nodepools=[..]: [nodes] -> [n replacement(s)]`."""
    nodes = ", ".join(command.candidates)
    pools = ", ".join(nodepools)
    text = f"{command.reason}/{decision_id}: {command.decision.value}: nodepools=[{pools}]: [{nodes}]"
    if command.replacements:
        text += f" -> [{command.replacements} replacement(s)]"
    return text


def disrupting(decision_id: str, found: Found, world: World, projection: Projection) -> acts.Said:
    """Upstream's `disrupting nodeclaim(s) via ...` line for a decision: each candidate's node,
    instance and capacity type and pods to move; the replacements' capacity and instance types."""
    nodes = {n.state.nodeclaim: n for n in world.nodes}
    candidates = []
    for name in found.command.candidates:
        claim, node = projection.claims.get(name), nodes.get(name)
        candidates.append(
            acts.Disrupted(
                name=(claim.node if claim else None) or name,
                instance_type=(claim.instance_type if claim else None) or "",
                capacity_type=(claim.capacity_type if claim else None) or "",
                pods=sum(1 for p in node.state.pods if p.reschedulable) if node else 0,
                nodeclaim=name,
            )
        )
    replacements = [
        acts.Replacement(
            sorted({offer.capacity_type for o in planned.options for offer in o.offers}),
            [o.instance.name for o in planned.options],
        )
        for planned in found.new_claims
    ] or [acts.Replacement()] * found.command.replacements
    return acts.disrupting(decision_id, found.command.reason, found.nodepool, candidates, replacements)
