"""What a consumer accepts from the stream: an event envelope whose subject, headers and stream
agree with its body, and whose payload keeps its contract. Anything else is `Malformed`, and goes
to the dead letters (`shared.bus.consumer`)."""

from __future__ import annotations

from typing import Any

import orjson
from nats.aio.msg import Msg
from pydantic import ValidationError

from shared.bus.names import MSG_ID, POSITION, STORE, BusNames
from shared.events.contracts import Event
from shared.events.decode import decode as decode_payload
from shared.events.envelope import RecordedEvent
from shared.events.registry import UnknownEventType


class Malformed(ValueError):
    """A message that is not a valid nodewright event where it was found."""


def problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))


def contract(recorded: RecordedEvent) -> Event:
    """The payload as its contract, upcast to the current schema; Malformed says why not."""
    try:
        return decode_payload(recorded)  # the projection that follows takes the same object
    except UnknownEventType as exc:
        raise Malformed(str(exc)) from None
    except ValidationError as exc:
        raise Malformed(f"the payload breaks its contract: {problems(exc)}") from None


def decode(body: bytes) -> RecordedEvent:
    """An envelope from its JSON (for readers outside a typed handler)."""
    try:
        return RecordedEvent.from_json_dict(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        raise Malformed(f"not JSON: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Malformed(f"not an event envelope: {exc!r}") from None


def check_delivery(raw: Msg, recorded: RecordedEvent, names: BusNames, store: str) -> None:
    """A JetStream delivery came from this deployment's stream, and is what `check_message` asks."""
    stream = raw.metadata.stream if raw.metadata else None
    if stream != names.stream:
        raise Malformed(f"delivered from stream {stream!r}, not {names.stream!r}")
    check_message(raw, recorded, names, store)


def check_message(raw: Msg, recorded: RecordedEvent, names: BusNames, store: str) -> None:
    """The message is on the subject of its event's type and stream, with the store, id and
    position of its body: one published anywhere else, relabelled, or of a store this
    deployment does not have, is refused however valid its payload. It may still not be in the
    store: that is the consumer's to check (`shared.bus.projection`, `shared.bus.work`)."""
    expected = names.event_subject(recorded.stream_id, recorded.type)
    if raw.subject != expected:
        raise Malformed(
            f"subject {raw.subject!r} does not match the event: {recorded.type} of stream"
            f" {recorded.stream_id!r} is published on {expected!r}"
        )
    headers: dict[str, Any] = raw.headers or {}
    if headers.get(STORE) != store:
        raise Malformed(f"header {STORE} {headers.get(STORE)!r} names an unknown store (this one is {store!r})")
    if headers.get(MSG_ID) != names.msg_id(recorded.event_id, store):
        expected = names.msg_id(recorded.event_id, store)
        raise Malformed(f"header {MSG_ID} {headers.get(MSG_ID)!r} is not {expected!r}")
    if headers.get(POSITION) != str(recorded.position):
        raise Malformed(f"header {POSITION} {headers.get(POSITION)!r} is not the body's position {recorded.position}")
