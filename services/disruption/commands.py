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
  again); without replacements, `DisruptionCompleted` and the deletions in the same append.
- Replacements: once every one is initialized, `DisruptionCompleted` and the deletions; a
  replacement that failed, or the wait past `command_timeout`, cancels the command (the
  candidates' budget is released; replacements already up stay, for consolidation to judge).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter

from services.disruption.projection import Command, Projection
from services.disruption.world import build
from shared import acts
from shared.api.nodepool import DisruptionReason
from shared.disruption.passes import recheck
from shared.disruption.validation import REJECTED, VALIDATION_DELAY, command_timeout
from shared.events import contracts as c
from shared.events.envelope import NewEvent, only_event_id
from shared.policy.violations import ReservationError
from shared.ports.cluster import NODE, NODEPOOL, NORMAL, WARNING, KubeEvent
from shared.runtime import logs
from shared.runtime.ledger import Ledger
from shared.runtime.recorder import Recorder
from shared.scheduling.claims import claim_created
from shared.scheduling.offerings import InstanceOption
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
        catalog: Callable[[], Sequence[InstanceOption]],
        spot_to_spot: bool,
        disrupted: Counter,
        validation_attempts: Counter,
    ) -> None:
        self.ledger, self.projection, self.recorder = ledger, projection, recorder
        self.catalog = catalog
        """The instance types of the leader's last look (loaded as it takes over)."""
        self.spot_to_spot = spot_to_spot
        self.disrupted, self.validation_attempts = disrupted, validation_attempts

    async def progress(self, now: datetime) -> bool:
        """Move every command under way one step if it can; whether any moved."""
        moved = False
        for command in self.projection.live_commands():
            if command.kept is None:
                if command.forceful:
                    moved |= await self._complete(command, command.candidates, now)
                elif now >= command.decided_at + _delay(command):
                    moved |= await self._validate(command, now)
            else:
                moved |= await self._await_replacements(command, now)
        return moved

    async def _validate(self, command: Command, now: datetime) -> bool:
        """One validation attempt, said before it starts and after it ends, and counted by its
        result: a command's events are recorded once whatever happens (their ids are fixed), so
        only these show a command validated twice, by one leader or by two."""
        fields = {"command-id": command.decision_id, "reason": command.reason.lower()}
        log.info("validating disruption command", **fields)
        moved, result = await self._recheck(command, now)
        self.validation_attempts.labels(result).inc()
        log.info("validated disruption command", **fields, result=result)
        return moved

    async def _recheck(self, command: Command, now: datetime) -> tuple[bool, str]:
        """Whether the command moved, and the validation's result: `validated` (the replacements
        launching, or the command completed), `cancelled`, or `not recorded` (another leader
        moved the command first, or the store refused the step)."""
        projection = self.projection
        counters = await self.ledger.store.counters()
        world = build(
            projection, counters, self.catalog(), now, spot_to_spot=self.spot_to_spot, judging=command.decision_id
        )
        moved = [
            name
            for name in command.candidates
            if (claim := projection.claims.get(name)) is None or claim.touched > command.observed
        ]
        verdict = recheck(
            world,
            reason=command.reason,
            candidates=command.candidates,
            replacements=len(command.replacements),
            moved=moved,
        )
        if verdict.cancelled:
            why = "; ".join(f"{name}: {reason}" for name, reason in sorted(verdict.dropped.items()))
            await self._cancel(command, why, now, rejected=sorted(set(verdict.dropped.values())))
            return True, CANCELLED
        validated = c.DisruptionValidated(
            decision_id=command.decision_id,
            nodepool=command.nodepool,
            reason=command.reason,
            kept=list(verdict.keep),
            dropped=dict(verdict.dropped),
        )
        appends = [Append(_stream(command), command.version, [self._new(validated, now, "validated")])]
        if command.replacements:
            said = []
            for name, planned in zip(command.replacements, verdict.new_claims, strict=False):
                created = claim_created(name, planned, replacement_for=command.decision_id)
                event = NewEvent.of(
                    created, occurred_at=now, producer="disruption", event_id=first_event_id(created.stream_id)
                )
                appends.append(Append(created.stream_id, NO_STREAM, [event]))
                types = [t.name for t in created.instance_types]
                said.append(acts.created_nodeclaim(created.nodepool, name, created.requests, types))
            if await self._append(appends, command, "validation"):
                for message, fields in said:
                    log.info(message, **fields, **{"command-id": command.decision_id})
                await self._tell(command, "DisruptionLaunching", f"Launching NodeClaim: {_said(command)}", now)
                return True, VALIDATED
            await self._cancel(command, "a replacement was refused", now)
            return True, CANCELLED
        if await self._complete(command, list(verdict.keep), now, validated):
            return True, VALIDATED
        return False, NOT_RECORDED

    async def _await_replacements(self, command: Command, now: datetime) -> bool:
        projection = self.projection
        kept = command.kept or []  # validated with replacements (without, it was completed at once)
        created = command.created
        failed = [name for name in created if name not in projection.claims and name not in projection.initialized]
        if failed:
            await self._cancel(command, f"replacement {failed[0]} failed to launch", now)
            return True
        if len(created) == len(command.replacements) and all(n in projection.initialized for n in created):
            return await self._complete(command, kept, now)
        if now >= command.decided_at + command_timeout(len(projection.live_commands())):
            await self._cancel(command, "timed out waiting for replacements to initialize", now)
            return True
        await self._tell(command, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", now)
        return False

    async def _complete(
        self, command: Command, candidates: list[str], now: datetime, validated: c.DisruptionValidated | None = None
    ) -> bool:
        """`DisruptionCompleted`: the candidates still there go to termination."""
        projection = self.projection
        live = [name for name in candidates if name in projection.claims]
        events = []
        if validated is not None:
            events.append(self._new(validated, now, "validated"))
        done = c.DisruptionCompleted(decision_id=command.decision_id, nodepool=command.nodepool, reason=command.reason)
        events.append(self._new(done, now, "completed"))
        appends = [Append(_stream(command), command.version, events)]
        for name in live:
            if projection.claims[name].deleting:
                continue
            deletion = c.NodeClaimDeletionRequested(
                nodeclaim=name, nodepool=command.nodepool, reason=command.reason, decision_id=command.decision_id
            )
            # one id per claim, as the watcher's for the same deletion seen on the NodeClaim object
            # (termination deletes the object): the log keeps the first, with the decision's reason
            request = NewEvent.of(
                deletion,
                occurred_at=now,
                producer="disruption",
                event_id=only_event_id(deletion.stream_id, deletion.TYPE),
            )
            appends.append(Append(deletion.stream_id, ANY, [request]))
        if not await self._append(appends, command, "completion"):
            return False
        for name in live:
            claim = projection.claims.get(name)
            capacity = (claim.capacity_type if claim else None) or ""
            self.disrupted.labels(command.reason.lower(), command.nodepool, capacity).inc()
        how = "Disrupting NodeClaim" if command.forceful else "Disrupting Node"
        await self._tell(command, "DisruptionTerminating", f"{how}: {_said(command)}", now)
        return True

    async def _cancel(self, command: Command, why: str, now: datetime, rejected: list[str] | None = None) -> None:
        cancelled = c.DisruptionCancelled(
            decision_id=command.decision_id,
            nodepool=command.nodepool,
            reason=command.reason,
            candidates=list(command.candidates),
            why=why[:1000],
        )
        appends = [Append(_stream(command), command.version, [self._new(cancelled, now, "cancelled")])]
        if not await self._append(appends, command, "cancellation"):
            return
        cancelled_fields = {"command-id": command.decision_id, "reason": command.reason.lower(), "why": why}
        log.info("cancelled disruption command", **cancelled_fields)
        if rejected is not None and command.reason in (DisruptionReason.EMPTY, DisruptionReason.UNDERUTILIZED):
            savings = f" (savings: ${command.savings or 0:.2f})"
            text = f"Consolidation rejected: {_said(command)}, reason: {', '.join(rejected)}{savings}"
            await self._tell(command, REJECTED, text, now, WARNING)

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

    async def _tell(self, command: Command, reason: str, message: str, now: datetime, kind: str = NORMAL) -> None:
        projection = self.projection
        events = []
        for name in command.kept or command.candidates:
            claim = projection.claims.get(name)
            if claim is not None and claim.node:
                events.append(KubeEvent(NODE, claim.node, kind, reason, message))
        if not events:
            events.append(KubeEvent(NODEPOOL, command.nodepool, kind, reason, message))
        await self.recorder.publish(events, now)


def _delay(command: Command) -> timedelta:
    return timedelta(0) if command.reason == DisruptionReason.DRIFTED else VALIDATION_DELAY


def _stream(command: Command) -> str:
    return c.DisruptionDecided.stream_of(command.decision_id)


def _said(command: Command) -> str:
    return f"{command.reason}/{command.decision_id}"
