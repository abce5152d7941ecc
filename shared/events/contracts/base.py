"""What every event contract shares: the base model, its stream, and the kinds of stream."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.api.nodepool import DisruptionReason
from shared.api.quantity import Quantity

Resources = dict[str, Quantity]

FORCEFUL_REASONS = frozenset({"Expired", "OverLimit", "Overprovisioned", "Unhealthy"})
"""Reasons that pass budgets (upstream's forceful expiration; the removal above a lowered
`limits.nodes`; node repair's)."""
DISRUPTION_REASONS = frozenset(r.value for r in DisruptionReason) | FORCEFUL_REASONS


def stream_name(kind: str, key: str) -> str:
    """Every stream id is `<kind>-<key>`: `nodeclaim-web-x1`, `pod-default/web-0`."""
    return f"{kind}-{key}"


class Event(BaseModel):
    """The base of every contract; `TYPE` and `SCHEMA_VERSION` name it on the wire."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    TYPE: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int] = 1
    STREAM_KIND: ClassVar[str]

    @property
    def stream_id(self) -> str:
        return stream_name(self.STREAM_KIND, self._stream_key())

    @classmethod
    def stream_of(cls, key: str) -> str:
        """The stream of the object `key` names, for a reader that has no event in hand."""
        return stream_name(cls.STREAM_KIND, key)

    def _stream_key(self) -> str:
        raise TypeError(f"{type(self).__name__} must say which stream it belongs to")

    def payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class NodePoolEvent(Event):
    STREAM_KIND: ClassVar[str] = "nodepool"
    nodepool: str

    def _stream_key(self) -> str:
        return self.nodepool


class NodeClaimEvent(Event):
    STREAM_KIND: ClassVar[str] = "nodeclaim"
    nodeclaim: str
    nodepool: str

    def _stream_key(self) -> str:
        return self.nodeclaim


class NamespacedEvent(Event):
    """About one namespaced object: its stream key is `namespace/name`, as kubectl names it."""

    namespace: str
    name: str

    def _stream_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        """`namespace/name`, as kubectl and the cluster port name the object."""
        return self._stream_key()


class PodEvent(NamespacedEvent):
    STREAM_KIND: ClassVar[str] = "pod"


class NodeEvent(Event):
    STREAM_KIND: ClassVar[str] = "node"
    node: str

    def _stream_key(self) -> str:
        return self.node


class DisruptionEvent(Event):
    STREAM_KIND: ClassVar[str] = "disruption"
    decision_id: str
    nodepool: str
    reason: str = Field(
        description="a budget reason (Underutilized, Empty, Drifted), Expired, OverLimit, Overprovisioned or Unhealthy"
    )

    def _stream_key(self) -> str:
        return self.decision_id

    @field_validator("reason")
    @classmethod
    def _known_reason(cls, value: str) -> str:
        if value not in DISRUPTION_REASONS:
            raise ValueError(f"Unsupported value: {value!r}: supported values: {', '.join(sorted(DISRUPTION_REASONS))}")
        return value
