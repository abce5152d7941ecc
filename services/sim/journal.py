"""The sim's world, kept as a journal on JetStream so a sim killed with SIGKILL comes back to the
same world (a cloud's and a cluster's state outlive their API servers).

The world is deterministic (`services.sim.world`): the same scenario and the same calls at the
same instants give the same world. So the journal holds calls, not state: every advance of the
clock that changed anything, and every request that may change the world, each with its instant.
A step is written, and acknowledged by JetStream, before anyone can see what it did (a reply, an
announcement, a later read), so a restart replays at least everything that was seen. The world's
journal is one subject of the deployment's `<deployment>_SIM` stream, named by `NODEWRIGHT_SIM_WORLD`
(`nodewright up` gives every run a fresh one). More in docs/guide.md, "The sim's journal".
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared.bus.names import MSG_ID, BusNames
from shared.runtime.outages import OUTAGES, Backoff

FETCH = 500
"""Steps read per request while replaying."""
FETCH_TIMEOUT = 2.0


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


def journal_config(names: BusNames, replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=names.sim_journal_stream,
        subjects=[names.sim_journal("*")],
        storage=StorageType.FILE,
        num_replicas=replicas,
    )


class Journal:
    """Appends a world's steps in order and reads them back; `written` counts the messages, and
    is each one's id, so a publish retried after a lost acknowledgement is kept once."""

    def __init__(
        self, js: JetStreamContext, names: BusNames, world: str, replicas: int = 1, inbox: bytes | None = None
    ) -> None:
        self.js = js
        self.inbox = inbox
        """Where replays are delivered: the sim's user may subscribe to its own inbox only."""
        self.names = names
        self.world = world
        self.subject = names.sim_journal(world)
        self.replicas = replicas
        self.written = 0

    async def ensure(self) -> None:
        """The stream exists with this deployment's replicas."""
        config = journal_config(self.names, self.replicas)
        try:
            info = await self.js.stream_info(config.name)
        except NotFoundError:
            await self.js.add_stream(config)
            return
        if (info.config.num_replicas or 1) != self.replicas:
            await self.js.update_stream(config)

    async def read(self) -> list[Step]:
        """Every step of this world, in the order written (none for a new world)."""
        info = await self.js.stream_info(self.names.sim_journal_stream, subjects_filter=self.subject)
        expected = (info.state.subjects or {}).get(self.subject, 0)
        steps: list[Step] = []
        if not expected:
            return steps
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0)
        sub = await self.js.pull_subscribe(
            self.subject, stream=self.names.sim_journal_stream, config=config, inbox_prefix=self.inbox
        )
        try:
            messages = 0
            while messages < expected:
                for message in await sub.fetch(FETCH, timeout=FETCH_TIMEOUT):
                    messages += 1
                    steps.extend(Step.from_dict(s) for s in json.loads(message.data))
        finally:
            await sub.unsubscribe()
        self.written = messages
        return steps

    async def write(self, steps: list[Step], stopping: asyncio.Event | None = None) -> None:
        """Append `steps` as one message, tried until JetStream acknowledges it: the world stands
        still meanwhile (a NATS restart, a stream leader elected)."""
        if not steps:
            return
        data = json.dumps([s.to_dict() for s in steps], separators=(",", ":")).encode()
        msg_id = f"{self.names.deployment}:{self.world}:{self.written + 1}"
        backoff = Backoff(0.1, 2.0)
        while True:
            try:
                await self.js.publish(self.subject, data, headers={MSG_ID: msg_id})
                break
            except OUTAGES:
                if stopping is not None and stopping.is_set():
                    raise
                await backoff.wait(stopping)
        self.written += 1

    async def forget(self) -> None:
        """Drop this world's steps: a world that lived for one run is not resumed."""
        await self.js.purge_stream(self.names.sim_journal_stream, subject=self.subject)
