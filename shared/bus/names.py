"""Every name a deployment owns on the bus, built in one place.

A deployment name (`NODEWRIGHT_DEPLOYMENT`, default `default`) prefixes the stream, every subject
(events, dead letters, the sim's requests) and every message id, so two deployments sharing one
NATS server never see, nor de-duplicate, each other's messages.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from shared.deployment import DEFAULT_DEPLOYMENT, check_deployment
from shared.events.envelope import stream_kind

MSG_ID = "Nats-Msg-Id"
POSITION = "Nodewright-Position"
"""The log position of the event a message carries, beside its body."""
STORE = "Nodewright-Store"
"""The id of the event store whose event a message carries (migration 0004)."""
REASON = "Nodewright-Dead-Reason"
ORIGINAL_SUBJECT = "Nodewright-Original-Subject"
DEAD_SERVICE = "Nodewright-Service"


@dataclass(frozen=True, slots=True)
class BusNames:
    deployment: str = DEFAULT_DEPLOYMENT

    def __post_init__(self) -> None:
        check_deployment(self.deployment)

    @property
    def stream(self) -> str:
        return f"{self.deployment}_NODEWRIGHT"

    @property
    def events(self) -> str:
        """Every event subject: `<deployment>.events.<stream kind>.<EventType>`."""
        return f"{self.deployment}.events.>"

    def event_subject(self, stream_id: str, event_type: str) -> str:
        return f"{self.deployment}.events.{stream_kind(stream_id)}.{event_type}"

    def event_type_subject(self, kind: str, event_type: str) -> str:
        return f"{self.deployment}.events.{kind}.{event_type}"

    def dead(self, service: str) -> str:
        return f"{self.deployment}.dead.{service}"

    @property
    def all_dead(self) -> str:
        return f"{self.deployment}.dead.>"

    def msg_id(self, event_id: uuid.UUID | str, store: str) -> str:
        """JetStream de-duplicates by this: the event id, of this store, in this deployment only
        (event ids repeat between stores that play the same scenario)."""
        return f"{self.deployment}:{store}:{event_id}"

    def dead_msg_id(self, service: str, original: str) -> str:
        return f"{self.deployment}:dead:{service}:{original}"

    def sim_request(self, caller: str, request: str) -> str:
        """`<deployment>.sim.<caller>.<request>`: a request that service may send
        (`shared.bus.topology.SIM_CALLERS`). Each caller publishes on its own subjects only, so
        the sim knows who asks."""
        return f"{self.deployment}.sim.{caller}.{request}"

    @property
    def sim_journal_stream(self) -> str:
        """The stream the sim keeps its worlds' journals on (`services.sim.journal`)."""
        return f"{self.deployment}_SIM"

    def sim_journal(self, world: str) -> str:
        """`<deployment>.sim.journal.<world>`: one world's steps (`*` for every world)."""
        return f"{self.deployment}.sim.journal.{world}"

    def inbox(self, user: str) -> str:
        """The inbox prefix of a user: replies and push deliveries to it, and nobody else."""
        return f"_INBOX.{self.deployment}.{user}"
