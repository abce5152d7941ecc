"""A recorded event's payload as its contract, decoded in this one place.

Projections dispatch on the contract class (`{c.PodBound: _bound, ...}`) and read attributes, so
"find usages" of a contract leads from its producers to every consumer. An event is decoded once
per service: the projection consumer's contract check and each projection layer (the scheduling
view inside disruption's, the shared cluster fold) ask for the same `RecordedEvent`, and the last
one decoded is kept for the next ask (the log is applied one event at a time, in order).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from shared.events.contracts import CONTRACTS, Event
from shared.events.envelope import RecordedEvent
from shared.events.registry import REGISTRY

P = TypeVar("P")
Step = Callable[[P, Any, RecordedEvent], None]
"""A projection's handler: the projection, the event as its contract, its envelope."""

CLASSES: Mapping[str, type[Event]] = {contract.TYPE: contract for contract in CONTRACTS}
"""Type name -> contract class, for a dispatch that decodes only what it handles."""

_last: list[tuple[RecordedEvent, Event]] = []


def decode(recorded: RecordedEvent) -> Event:
    """The payload as its contract, upcast to the current schema (`shared.events.registry`);
    raises `UnknownEventType` or pydantic's `ValidationError` when it is not one."""
    if _last and _last[0][0] is recorded:
        return _last[0][1]
    event = REGISTRY.decode(recorded.type, recorded.schema_version, recorded.data)
    _last[:] = [(recorded, event)]
    return event


def handled(steps: Mapping[type[Event], object]) -> frozenset[str]:
    """The event types a handler table reads: what a service subscribes to and validates."""
    return frozenset(contract.TYPE for contract in steps)


def dispatch(projection: P, steps: Mapping[type[Event], Step[P]], recorded: RecordedEvent) -> Event | None:
    """Decode the event if the table handles its type and run its step; the decoded event, or
    None when the table does not read this type (nothing is decoded then)."""
    contract = CLASSES.get(recorded.type)
    step = steps.get(contract) if contract is not None else None
    if step is None:
        return None
    event = decode(recorded)
    step(projection, event, recorded)
    return event
