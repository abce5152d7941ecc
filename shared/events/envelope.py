"""The envelope around a payload: identity, stream, causation and time.

`occurred_at` is the clock's time of the decision (a parameter, so replays and accelerated
clocks agree); `recorded_at` is the database's wall time at commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from shared.events.contracts import Event

EVENT_IDS = uuid.UUID("6f1d0c1e-4b7a-5d7e-9c3a-6e6f64657772")
"""Namespace of deterministic event ids: a retried decision gets the id it had the first time."""


def first_event_id(stream_id: str) -> uuid.UUID:
    """The id of the event that opens `stream_id`; retrying a reservation re-appends it idempotently."""
    return uuid.uuid5(EVENT_IDS, f"{stream_id}@1")


def only_event_id(stream_id: str, event_type: str) -> uuid.UUID:
    """The id of a stream's one event of this type (a claim's deletion request): whoever records
    it, however often, the log keeps one."""
    return uuid.uuid5(EVENT_IDS, f"{stream_id}#{event_type}")


@dataclass(frozen=True, slots=True)
class Metadata:
    producer: str
    causation_id: str | None = None
    correlation_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (
                ("producer", self.producer),
                ("causation_id", self.causation_id),
                ("correlation_id", self.correlation_id),
            )
            if v is not None
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metadata:
        return cls(data.get("producer", ""), data.get("causation_id"), data.get("correlation_id"))


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended; `data` is the payload as JSON-ready dict."""

    stream_id: str
    type: str
    data: dict[str, Any]
    occurred_at: datetime
    metadata: Metadata
    schema_version: int = 1
    event_id: uuid.UUID = field(default_factory=uuid.uuid4)
    validated: bool = field(default=False, compare=False)
    """True when built from a contract (`of`): the store then skips validating it again."""

    @classmethod
    def of(
        cls,
        event: Event,
        *,
        occurred_at: datetime,
        producer: str,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> NewEvent:
        if occurred_at.tzinfo is None:
            raise ValueError("occurred_at must be timezone-aware")
        return cls(
            stream_id=event.stream_id,
            type=event.TYPE,
            data=event.payload(),
            occurred_at=occurred_at,
            metadata=Metadata(producer, causation_id, correlation_id),
            schema_version=event.SCHEMA_VERSION,
            event_id=event_id or uuid.uuid4(),
            validated=True,
        )


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as the log holds it."""

    position: int
    event_id: uuid.UUID
    stream_id: str
    version: int
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: Metadata
    occurred_at: datetime
    recorded_at: datetime

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "event_id": str(self.event_id),
            "stream_id": self.stream_id,
            "version": self.version,
            "type": self.type,
            "schema_version": self.schema_version,
            "data": self.data,
            "metadata": self.metadata.to_dict(),
            "occurred_at": self.occurred_at.isoformat(),
            "recorded_at": self.recorded_at.isoformat(),
        }

    @classmethod
    def from_json_dict(cls, row: dict[str, Any]) -> RecordedEvent:
        return cls(
            position=int(row["position"]),
            event_id=uuid.UUID(row["event_id"]),
            stream_id=row["stream_id"],
            version=int(row["version"]),
            type=row["type"],
            schema_version=int(row.get("schema_version", 1)),
            data=row["data"],
            metadata=Metadata.from_dict(row.get("metadata") or {}),
            occurred_at=datetime.fromisoformat(row["occurred_at"]),
            recorded_at=datetime.fromisoformat(row["recorded_at"]),
        )


def stream_kind(stream_id: str) -> str:
    """`nodeclaim` of `nodeclaim-web-1`: the family of streams a bus subject names
    (`shared.bus.names`)."""
    return stream_id.split("-", 1)[0]


class Entry(Protocol):
    """A logged event as a reader of a whole log needs it (a `RecordedEvent`, a line of an
    exported log): what, about what and when."""

    @property
    def type(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def occurred_at(self) -> datetime: ...
