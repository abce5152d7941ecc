"""The sim's world, kept as a journal on JetStream so a sim killed with SIGKILL comes back to the
same world (a cloud's and a cluster's state outlive their API servers).

The world is deterministic (`services.sim.world`): the same scenario and the same calls at the
same instants give the same world. So the journal holds calls, not state: every advance of the
clock that changed anything, and every request that may change the world, each with its instant.
A step is written, and acknowledged by JetStream, before anyone can see what it did (a reply, an
announcement, a later read), so a restart replays at least everything that was seen; a step the
journal refuses ends the process (`JournalBroken`), whose restart replays what was kept. The world's
journal is one subject of the deployment's `<deployment>_SIM` stream, named by `NODEWRIGHT_SIM_WORLD`
(`nodewright up` gives every run a fresh one). More in docs/simulation.md, "The sim's journal".

The stream is provisioned by `nodewright bus setup` (`shared.bus.setup`), not by the sim, and the
journal is read back message by message, without a consumer: the sim's NATS user may make neither
(a consumer's deliver subject is the one thing its permissions could not bound).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from shared.bus.names import MSG_ID, BusNames
from shared.bus.setup import require_stream
from shared.outages import OUTAGES, Backoff

log = structlog.get_logger("nodewright.sim")
EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a message whose expected last subject sequence is not the last."""
NO_MESSAGE_FOUND = 10037
"""JetStream's error code for a get past a subject's last message (a missing stream is another)."""

JOURNAL_FORMAT = 3
"""Raised when what a step means changes (the world's rules, a request's body): a world named
after its scenario (`services.sim.__main__.world_of`) is then a new one."""


@dataclass(frozen=True, slots=True)
class Step:
    """One call the world took: an advance to `at`, or the request `request` with `body` at `at`."""

    at: datetime
    request: str | None = None
    body: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"at": self.at.isoformat()}
        if self.request is not None:
            out["request"] = self.request
            out["body"] = self.body or {}
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Step:
        return cls(datetime.fromisoformat(raw["at"]), raw.get("request"), raw.get("body"))


class JournalBroken(RuntimeError):
    """The journal refuses this sim's next step (another writer extended it, the stream is gone):
    the world in memory can no longer be trusted to be the journal's, so the process stops and
    its restart replays the journal."""


class Journal:
    """Appends a world's steps in order and reads them back. Each append expects the sequence of
    the world's last message (`Nats-Expected-Last-Subject-Sequence`), so a second writer (a sim
    killed while its write was on the way, two sims on one world) fences the other out instead of
    interleaving; the message id, unique to this process, keeps a retried append once."""

    def __init__(self, js: JetStreamContext, names: BusNames, world: str) -> None:
        self.js = js
        self.names = names
        self.world = world
        self.subject = names.sim_journal(world)
        self.process = uuid.uuid4().hex[:12]
        self.written = 0
        self.last = 0
        """The stream sequence of the world's newest message (0: none)."""
        self.failing: str | None = None
        """Why the last append is still being tried, for readiness."""

    async def require(self) -> None:
        """The stream is there; NotSetUp (a start-up step, tried again) names what makes it."""
        await require_stream(self.js, self.names.sim_journal_stream)

    async def read(self) -> list[Step]:
        """Every step of this world, in the order written (none for a new world): each message
        asked for by sequence, the next of this world's subject after the last one read."""
        steps: list[Step] = []
        sequence = 1
        while True:
            try:
                message = await self.js.get_msg(
                    self.names.sim_journal_stream, seq=sequence, subject=self.subject, next=True
                )
            except NotFoundError as exc:
                if exc.err_code != NO_MESSAGE_FOUND:  # the stream went away: not an empty world
                    raise
                return steps
            if message.seq is None or message.data is None:
                raise JournalBroken(f"the journal of world {self.world} gave a message without a sequence or data")
            self.last = message.seq
            steps.extend(Step.from_dict(s) for s in json.loads(message.data))
            sequence = message.seq + 1

    async def write(self, steps: list[Step], stopping: asyncio.Event | None = None) -> None:
        """Append `steps` as one message, tried until JetStream acknowledges it: the world stands
        still meanwhile (a NATS restart, a stream leader elected). Raises JournalBroken when the
        journal refuses it for good."""
        if not steps:
            return
        data = json.dumps([s.to_dict() for s in steps], separators=(",", ":")).encode()
        headers = {
            MSG_ID: f"{self.names.deployment}:{self.world}:{self.process}:{self.written + 1}",
            EXPECTED_LAST: str(self.last),
        }
        backoff, tries = Backoff(0.1, 2.0), 0
        while True:
            try:
                landed = await self._append(data, headers)
                break
            except OUTAGES as exc:  # a NATS restart, a stream leader elected
                why = exc
            if stopping is not None and stopping.is_set():
                raise JournalBroken(f"stopped while a step of world {self.world} was not journaled: {why!r}")
            tries += 1
            self.failing = f"the journal does not take steps ({tries} tries): {why!r}"
            if tries == 1 or tries % 10 == 0:
                log.warning("the sim's journal does not take a step; the world stands still", error=repr(why))
            await backoff.wait(stopping)
        self.failing = None
        self.last = landed
        self.written += 1

    async def _append(self, data: bytes, headers: dict[str, str]) -> int:
        """One try: the sequence the step landed at. A refusal other than 'no leader yet' raises
        JournalBroken, unless it is this very step's earlier try, landed with its answer lost
        (JetStream checks the expected sequence before the message id)."""
        try:
            return (await self.js.publish(self.subject, data, headers=headers)).seq
        except ServiceUnavailableError:
            raise
        except APIError as exc:
            landed = await self._landed(headers[MSG_ID]) if exc.err_code == WRONG_LAST_SEQUENCE else None
            if landed is None:
                raise JournalBroken(f"the journal of world {self.world} refused a step: {exc}") from exc
            return landed

    async def _landed(self, msg_id: str) -> int | None:
        """The sequence of the world's newest message if it is the one `msg_id` names."""
        newest = await self.js.get_last_msg(self.names.sim_journal_stream, self.subject)
        return newest.seq if (newest.headers or {}).get(MSG_ID) == msg_id else None
