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
from shared.disruption.candidates import Blocked
from shared.disruption.command import Command
from shared.disruption.method import Found
from shared.disruption.passes import BUDGET, NODE_HARD_LIMIT, PoolBlocked, forceful, graceful
from shared.disruption.world import World
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.kube.nodeclaims import READS, NodeClaimRecords
from shared.policy.budgets import blocked_by_budget_message
from shared.policy.limits import blocked_by_node_limit_message
from shared.policy.violations import BudgetExceeded, NodeLimitExceeded, ReservationError
from shared.ports.cloud import CloudProvider
from shared.ports.cluster import NODE, NODEPOOL, WARNING, Cluster, KubeEvent
from shared.runtime import logs
from shared.runtime.leading import lead, quiet
from shared.runtime.ledger import Ledger
from shared.runtime.nodeclaims import NodeClaimWriter
from shared.runtime.recorder import Recorder
from shared.scheduling.claims import claim_name, instance_option
from shared.scheduling.offerings import InstanceOption
from shared.store.eventstore import EventStore, NotLeader, unit
from shared.store.leader import LeaderLock

PRODUCER = "disruption"
LEADER_LOCK = 0x6E77_6469_7372  # "nwdisr"
POLL = timedelta(seconds=10)
"""Upstream's disruption loop looks every 10 s, and at once after it acted."""
POOL_SAID_EVERY = timedelta(minutes=1)
NODE_SAID_EVERY = timedelta(minutes=2)
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
        poll: timedelta = POLL,
        nodeclasses: bool = False,
    ) -> None:
        """`nodeclasses`: the cloud resolves EC2NodeClasses (AWS), so no replacement is planned
        into a pool whose class is not Ready (the scheduler's gate, as the simulation sees it)."""
        self.store, self.cloud, self.clock = store, cloud, clock
        self.spot_to_spot, self.poll = spot_to_spot, poll
        self.recorder = Recorder(cluster, window=timedelta(0))  # the log's own dedupe decides what is said
        self.projection = Projection()
        self.projection.view.gated = nodeclasses
        self.catalog: list[InstanceOption] = []
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
            catalog=lambda: self.catalog,
            spot_to_spot=spot_to_spot,
            disrupted=self.metrics.disrupted,
            validation_attempts=self.metrics.validation_attempts,
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
        await self.objects.restart()
        await self._load_catalog()  # a command inherited mid-way is re-checked before the first pass

    async def _load_catalog(self) -> None:
        """The instance types and prices: a re-check without them finds no move for any pod."""
        if not self.catalog:
            self.catalog = [instance_option(t) for t in await self.cloud.instance_types()]

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
        started = time.perf_counter()
        world = build(self.projection, counters, self.catalog, now, spot_to_spot=self.spot_to_spot)
        found = forceful(world)
        result = graceful(world)
        self.metrics.evaluation.labels("all").observe(time.perf_counter() - started)
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
        await self._say(result.pool_blocked, result.blocked, now)
        judged = judgments(world)
        self.objects.kick(lambda: self.objects.keep_judgments(judged, now))  # in the background, after the decisions
        return decided

    async def _reserve(self, found: Found, now: datetime, world: World) -> str | None:
        command = found.command
        decision_id = str(uuid.uuid4())
        replacements = [claim_name(found.nodepool) for _ in range(command.replacements)]
        text = describe(decision_id, found.nodepool, command)
        decided = c.DisruptionDecided(
            decision_id=decision_id,
            nodepool=found.nodepool,
            reason=command.reason,
            candidates=list(command.candidates),
            replacements=replacements,
            forceful=found.forceful,
            command=text,
            decision=command.decision.value,
            consolidation_type=found.consolidation_type,
            savings=found.savings,
            observed_position=self.projection.position,
        )
        try:
            await self.ledger.reserve_disruption(decided, occurred_at=now)
        except (BudgetExceeded, NodeLimitExceeded) as exc:
            cause = BUDGET if isinstance(exc, BudgetExceeded) else NODE_HARD_LIMIT
            reason = DisruptionReason(command.reason)
            message = blocked_by_budget_message(reason) if cause == BUDGET else blocked_by_node_limit_message(reason)
            log.info("nodepool %s: %s not decided: %s", found.nodepool, command.reason, exc)
            await self._say([PoolBlocked(found.nodepool, command.reason, cause, message)], [], now)
            return None
        except ReservationError as exc:
            log.info("nodepool %s: %s not decided: %s", found.nodepool, command.reason, exc)
            return None
        self.metrics.decisions.labels(command.decision.value, command.reason.lower(), found.consolidation_type).inc()
        message, fields = disrupting(decision_id, found, world, self.projection)
        log.info(message, **fields)
        return decision_id

    async def _say(self, pools: list[PoolBlocked], nodes: list[Blocked], now: datetime) -> None:
        """`DisruptionBlocked`, in the log and as a Kubernetes Event: on a NodePool once a minute
        per reason and cause, on a node once every two minutes per cause."""
        said = self.projection.said
        events: list[c.DisruptionBlocked] = []
        seen: set[tuple[str, str, str]] = set()
        for b in pools:
            key = (b.nodepool, b.reason, b.cause)
            last = said.get(key)
            if key not in seen and (last is None or now - last >= POOL_SAID_EVERY):
                seen.add(key)
                events.append(
                    c.DisruptionBlocked(nodepool=b.nodepool, reason=b.reason, cause=b.cause, message=b.message)
                )
        for n in nodes:
            claim = self.projection.claims.get(n.nodeclaim)
            key = (n.nodeclaim, "", n.cause)
            last = said.get(key)
            if claim is not None and key not in seen and (last is None or now - last >= NODE_SAID_EVERY):
                seen.add(key)
                events.append(
                    c.DisruptionBlocked(
                        nodepool=claim.nodepool,
                        reason="",
                        cause=n.cause,
                        message=n.message,
                        nodeclaim=n.nodeclaim,
                        node=n.node,
                    )
                )
        if not events:
            return
        units = [unit(e.stream_id, None, [NewEvent.of(e, occurred_at=now, producer=PRODUCER)]) for e in events]
        for result in await self.ledger.append_units(units):  # fenced
            if isinstance(result, BaseException):
                if isinstance(result, NotLeader):
                    raise result
                log.warning("DisruptionBlocked not recorded: %s", result)
        kube = [
            KubeEvent(NODE, e.node, WARNING, "DisruptionBlocked", e.message)
            if e.node
            else KubeEvent(NODEPOOL, e.nodepool, WARNING, "DisruptionBlocked", e.message)
            for e in events
            if e.node or not e.nodeclaim
        ]
        await self.recorder.publish(kube, now)


def describe(decision_id: str, nodepool: str, command: Command) -> str:
    """Upstream's command text: `<Reason>/<id>: <decision>: nodepools=[..]: [nodes] -> [n replacement(s)]`."""
    nodes = ", ".join(command.candidates)
    text = f"{command.reason}/{decision_id}: {command.decision.value}: nodepools=[{nodepool}]: [{nodes}]"
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
