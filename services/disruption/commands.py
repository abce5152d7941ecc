"""Carrying a disruption command out (upstream's
`pkg/controllers/disruption/orchestration/queue.go`), as its stream tells it.

Each step appends to the command's own stream expecting the version the projection holds, so
whichever leader moves a command, it moves once: a standby that took over finishes or cancels
a command, never both, and an old leader's late step fails on the version (and on the fence).

- Forceful (Expired, OverLimit): at once, `DisruptionCompleted` with a NodeClaimDeletionRequested
  per candidate still there.
- Graceful: after the validation delay (15 s; none for drift, as upstream), `recheck`. Refused:
  `DisruptionCancelled` (and upstream's `ConsolidationRejected`). Passed: `DisruptionValidated`,
  with the replacements' NodeClaimCreated in the same append (the store checks the node limit
  again; a replacement in another pool than the candidates' is reserved there as a launch is);
  without replacements, `DisruptionCompleted` and the deletions in the same append.
- Replacements: once every one is initialized, `DisruptionCompleted` and the deletions; a
  replacement that failed, or the wait past `command_timeout`, cancels the command (the
  candidates' budget is released; replacements already up stay, for consolidation to judge).

A command whose candidates span pools is one decision per pool (`command_parts`): each step is
taken for all its parts in one append, so they move together.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from services.disruption.metrics import EVENTUAL_MODE, GRACEFUL_MODE, DisruptionMetrics, snake
from services.disruption.projection import Command, Projection
from services.disruption.world import build, reschedulable_on
from shared import acts
from shared.api.nodepool import DisruptionReason
from shared.disruption.passes import recheck
from shared.disruption.validation import REJECTED, VALIDATION_DELAY, command_timeout
from shared.events import contracts as c
from shared.events.envelope import NewEvent, only_event_id
from shared.policy.violations import ReservationError
from shared.ports.cluster import NODE, NODEPOOL, NORMAL, WARNING, KubeEvent
from shared.runtime import logs
from shared.runtime.catalogs import Loaded
from shared.runtime.ledger import Ledger
from shared.runtime.recorder import Recorder
from shared.scheduling.claims import claim_created
from shared.scheduling.rules import MinValuesPolicy
from shared.scheduling.values import PlannedClaim
from shared.store.eventstore import ANY, NO_STREAM, Append, NotLeader, StoreError, first_event_id

log = logs.controller("disruption")
_IDS = uuid.UUID("0f5d2b8e-4c0e-4b43-8f2e-636f6d6d616e")
VALIDATED, CANCELLED, NOT_RECORDED = "validated", "cancelled", "not recorded"
"""The results of a validation attempt (`nodewright_disruption_validation_attempts_total`)."""


class Commands:
    """The leader's commands under way. It reads the projection and writes through the leader's
    ledger (every step fenced), so it holds no service: what it is given is all it touches."""

    def __init__(
        self,
        ledger: Ledger,
        projection: Projection,
        recorder: Recorder,
        *,
        catalog: Callable[[], Loaded],
        spot_to_spot: bool,
        min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT,
        metrics: DisruptionMetrics,
    ) -> None:
        self.ledger, self.projection, self.recorder = ledger, projection, recorder
        self.catalog = catalog
        """The instance types of the leader's last look (loaded as it takes over)."""
        self.spot_to_spot, self.min_values_policy = spot_to_spot, min_values_policy
        self.metrics = metrics

    async def progress(self, now: datetime) -> bool:
        """Move every command under way one step if it can; whether any moved."""
        moved = False
        for parts in self.under_way():
            lead = parts[0]
            if lead.kept is None:
                if lead.forceful:
                    moved |= await self._complete(parts, {p.decision_id: p.candidates for p in parts}, now)
                elif now >= lead.decided_at + _delay(lead):
                    moved |= await self._validate(parts, now)
            else:
                moved |= await self._await_replacements(parts, now)
        return moved

    def under_way(self) -> list[list[Command]]:
        """The live commands, each as its parts (one decision per pool of its candidates, the
        first, which holds the replacements, first); every step of a command moves all its parts
        in one append, so they are live together."""
        live = {command.decision_id: command for command in self.projection.live_commands()}
        out: list[list[Command]] = []
        seen: set[str] = set()
        for command in live.values():
            if command.decision_id in seen:
                continue
            ids = command.parts or [command.decision_id]
            seen.update(ids)
            parts = [live[i] for i in ids if i in live]
            if len(parts) == len(ids):
                out.append(parts)
        return out

    async def _validate(self, parts: list[Command], now: datetime) -> bool:
        """One validation attempt, said before it starts and after it ends, and counted by its
        result: a command's events are recorded once whatever happens (their ids are fixed), so
        only these show a command validated twice, by one leader or by two."""
        fields = {"command-id": parts[0].decision_id, "reason": parts[0].reason.lower()}
        log.info("validating disruption command", **fields)
        moved, result = await self._recheck(parts, now)
        self.metrics.validation_attempts.labels(result).inc()
        log.info("validated disruption command", **fields, result=result)
        return moved

    async def _recheck(self, parts: list[Command], now: datetime) -> tuple[bool, str]:
        """Whether the command moved, and the validation's result: `validated` (the replacements
        launching, or the command completed), `cancelled`, or `not recorded` (another leader
        moved the command first, or the store refused the step)."""
        projection, lead = self.projection, parts[0]
        counters = await self.ledger.store.counters()
        world = build(
            projection,
            counters,
            self.catalog(),
            now,
            spot_to_spot=self.spot_to_spot,
            min_values_policy=self.min_values_policy,
            judging={p.decision_id for p in parts},
        )
        candidates = [name for p in parts for name in p.candidates]
        moved = [
            name
            for name in candidates
            if (claim := projection.claims.get(name)) is None or claim.touched > lead.observed
        ]
        verdict = recheck(
            world,
            reason=lead.reason,
            candidates=candidates,
            replacements=len(lead.replacements),
            moved=moved,
            pools=lead.replacement_pools,
        )
        kept = {p.decision_id: [n for n in p.candidates if n in verdict.keep] for p in parts}
        failed = len(candidates) if verdict.cancelled else len(verdict.dropped)
        if failed and lead.consolidation_type:  # upstream validates consolidation's commands only
            self.metrics.failed_validations.labels(lead.consolidation_type).inc(failed)
        if verdict.cancelled or not all(kept.values()):  # a part keeping nothing: the command goes whole or not
            dropped = verdict.dropped or {name: "no longer valid" for name in candidates}
            why = "; ".join(f"{name}: {reason}" for name, reason in sorted(dropped.items()))
            await self._cancel(parts, why, now, rejected=sorted(set(dropped.values())))
            return True, CANCELLED
        validated = {
            p.decision_id: c.DisruptionValidated(
                decision_id=p.decision_id,
                nodepool=p.nodepool,
                reason=p.reason,
                kept=kept[p.decision_id],
                dropped={n: why for n, why in verdict.dropped.items() if n in p.candidates},
            )
            for p in parts
        }
        if lead.replacements:
            appends = [
                Append(_stream(p), p.version, [self._new(validated[p.decision_id], now, "validated")]) for p in parts
            ]
            said, pools = [], []
            for name, planned in paired(lead, verdict.new_claims):
                created = claim_created(name, planned, replacement_for=lead.decision_id)
                if created.nodepool != lead.nodepool:  # reserved in its own pool as a launch is
                    created = created.model_copy(update={"replacement_from": lead.nodepool})
                event = NewEvent.of(
                    created, occurred_at=now, producer="disruption", event_id=first_event_id(created.stream_id)
                )
                appends.append(Append(created.stream_id, NO_STREAM, [event]))
                types = [t.name for t in created.instance_types]
                pools.append(created.nodepool)
                said.append(acts.created_nodeclaim(created.nodepool, name, created.requests, types))
            if await self._append(appends, lead, "validation"):
                for pool in pools:
                    self.metrics.created.labels(lead.reason.lower(), pool, "false").inc()
                for message, fields in said:
                    log.info(message, **fields, **{"command-id": lead.decision_id})
                await self._tell(parts, "DisruptionLaunching", f"Launching NodeClaim: {_said(lead)}", now)
                return True, VALIDATED
            await self._cancel(parts, "a replacement was refused", now)
            return True, CANCELLED
        if await self._complete(parts, kept, now, validated):
            return True, VALIDATED
        return False, NOT_RECORDED

    async def _await_replacements(self, parts: list[Command], now: datetime) -> bool:
        projection, lead = self.projection, parts[0]
        kept = {p.decision_id: p.kept or [] for p in parts}  # validated with replacements (else completed)
        created = lead.created
        failed = [name for name in created if name not in projection.claims and name not in projection.initialized]
        if failed:
            self._queue_failed(lead)
            await self._cancel(parts, f"replacement {failed[0]} failed to launch", now)
            return True
        if len(created) == len(lead.replacements) and all(n in projection.initialized for n in created):
            return await self._complete(parts, kept, now)
        if now >= lead.decided_at + command_timeout(len(self.under_way())):
            self._queue_failed(lead)
            await self._cancel(parts, "timed out waiting for replacements to initialize", now)
            return True
        await self._tell(parts, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", now)
        return False

    async def _complete(
        self,
        parts: list[Command],
        candidates: dict[str, list[str]],
        now: datetime,
        validated: dict[str, c.DisruptionValidated] | None = None,
    ) -> bool:
        """`DisruptionCompleted` for every part: the candidates still there go to termination."""
        projection, lead = self.projection, parts[0]
        appends, handed = [], []
        for part in parts:
            events = []
            if validated is not None:
                events.append(self._new(validated[part.decision_id], now, "validated"))
            done = c.DisruptionCompleted(decision_id=part.decision_id, nodepool=part.nodepool, reason=part.reason)
            events.append(self._new(done, now, "completed"))
            appends.append(Append(_stream(part), part.version, events))
            live = [name for name in candidates[part.decision_id] if name in projection.claims]
            handed.append((part, live))
            for name in live:
                if projection.claims[name].deleting:
                    continue
                deletion = c.NodeClaimDeletionRequested(
                    nodeclaim=name, nodepool=part.nodepool, reason=part.reason, decision_id=part.decision_id
                )
                # one id per claim, as the watcher's for the same deletion seen on the NodeClaim
                # object (termination deletes the object): the log keeps the first, with the
                # decision's reason
                request = NewEvent.of(
                    deletion,
                    occurred_at=now,
                    producer="disruption",
                    event_id=only_event_id(deletion.stream_id, deletion.TYPE),
                )
                appends.append(Append(deletion.stream_id, ANY, [request]))
        if not await self._append(appends, lead, "completion"):
            return False
        for part, live in handed:
            self._count_disrupted(part, live)
        how = "Disrupting NodeClaim" if lead.forceful else "Disrupting Node"
        await self._tell(parts, "DisruptionTerminating", f"{how}: {_said(lead)}", now)
        return True

    def _queue_failed(self, command: Command) -> None:
        """Upstream's queue_failures_total: the replacements not initialized when the command
        failed (upstream fills `consolidation_type` with the decision; here it is the type)."""
        projection = self.projection
        waiting = sum(1 for name in command.replacements if name not in projection.initialized)
        decision = "replace" if command.replacements else "delete"
        labels = self.metrics.queue_failures.labels(decision, snake(command.reason), command.consolidation_type)
        labels.inc(waiting)

    def _count_disrupted(self, command: Command, names: list[str]) -> None:
        """Upstream's nodeclaims_disrupted_total and pods_disruption_initiated_total, per claim
        handed to termination: the pool's consolidation policy for consolidation's commands only,
        the termination mode from the claim's terminationGracePeriod."""
        projection = self.projection
        reason = snake(command.reason)
        pool = projection.view.pools.get(command.nodepool)
        policy = snake(pool.spec.disruption.consolidation_policy) if pool and command.consolidation_type else ""
        for name in names:
            claim = projection.claims.get(name)
            if claim is None:
                continue
            mode = EVENTUAL_MODE if claim.grace_period else GRACEFUL_MODE
            labels = (reason, claim.nodepool, claim.capacity_type or "", policy, mode)
            self.metrics.disrupted.labels(*labels).inc()
            self.metrics.pods_disrupted.labels(*labels).inc(reschedulable_on(projection, claim.node))
            if command.condition is not None:
                unhealthy = (snake(command.condition), claim.nodepool, claim.capacity_type or "", claim.image_id or "")
                self.metrics.unhealthy_disrupted.labels(*unhealthy).inc()

    async def _cancel(self, parts: list[Command], why: str, now: datetime, rejected: list[str] | None = None) -> None:
        lead = parts[0]
        appends = []
        for part in parts:
            cancelled = c.DisruptionCancelled(
                decision_id=part.decision_id,
                nodepool=part.nodepool,
                reason=part.reason,
                candidates=list(part.candidates),
                why=why[:1000],
            )
            appends.append(Append(_stream(part), part.version, [self._new(cancelled, now, "cancelled")]))
        if not await self._append(appends, lead, "cancellation"):
            return
        cancelled_fields = {"command-id": lead.decision_id, "reason": lead.reason.lower(), "why": why}
        log.info("cancelled disruption command", **cancelled_fields)
        if rejected is not None and lead.reason in (DisruptionReason.EMPTY, DisruptionReason.UNDERUTILIZED):
            savings = f" (savings: ${lead.savings or 0:.2f})"
            text = f"Consolidation rejected: {_said(lead)}, reason: {', '.join(rejected)}{savings}"
            await self._tell(parts, REJECTED, text, now, WARNING)

    def _new(self, event: Any, now: datetime, step: str) -> NewEvent:
        """Each step of a command has an id of its own: asked twice, it is recorded once."""
        return NewEvent.of(
            event,
            occurred_at=now,
            producer="disruption",
            event_id=uuid.uuid5(_IDS, f"{event.decision_id}/{step}"),
        )

    async def _append(self, appends: list[Append], command: Command, step: str) -> bool:
        """One step, all or nothing and fenced: a lost lock (`NotLeader`) stops the leader."""
        try:
            await self.ledger.append_unit(appends)
        except NotLeader:
            raise
        except (StoreError, ReservationError) as exc:  # another leader moved it, or a limit refused
            log.info("command %s: %s not recorded: %s", command.decision_id, step, exc)
            return False
        return True

    async def _tell(self, parts: list[Command], reason: str, message: str, now: datetime, kind: str = NORMAL) -> None:
        projection = self.projection
        events = []
        for part in parts:
            for name in part.kept or part.candidates:
                claim = projection.claims.get(name)
                if claim is not None and claim.node:
                    events.append(KubeEvent(NODE, claim.node, kind, reason, message))
        if not events:
            events += [KubeEvent(NODEPOOL, part.nodepool, kind, reason, message) for part in parts]
        await self.recorder.publish(events, now)


def paired(command: Command, planned: Sequence[PlannedClaim]) -> list[tuple[str, PlannedClaim]]:
    """Each replacement's name with a new claim of the pool the decision named it for (the
    re-check made sure the pools agree)."""
    names: dict[str, list[str]] = {}
    for name, pool in zip(command.replacements, command.replacement_pools, strict=True):
        names.setdefault(pool, []).append(name)
    out = []
    for claim in planned:
        free = names.get(claim.nodepool)
        if free:
            out.append((free.pop(0), claim))
    return out


def _delay(command: Command) -> timedelta:
    return timedelta(0) if command.reason == DisruptionReason.DRIFTED else VALIDATION_DELAY


def _stream(command: Command) -> str:
    return c.DisruptionDecided.stream_of(command.decision_id)


def _said(command: Command) -> str:
    return f"{command.reason}/{command.decision_id}"
