"""What an append is made of: a unit is one or more streams, each with the version it expects and
its events, written all or nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.events.envelope import NewEvent

ANY = None
"""expected_version for an append that does not care where the stream is."""
NO_STREAM = 0
"""expected_version for an append that creates the stream."""


@dataclass(frozen=True, slots=True)
class Append:
    stream_id: str
    expected_version: int | None
    events: Sequence[NewEvent]


Unit = Sequence[Append]


def unit(stream_id: str, expected_version: int | None, events: Sequence[NewEvent]) -> list[Append]:
    return [Append(stream_id, expected_version, events)]
