"""What an append can be refused with, besides a broken rule (`shared.policy.counters`)."""

from __future__ import annotations

from shared.store.fence import Fence


class StoreError(Exception):
    pass


class ConcurrencyConflict(StoreError):
    """The stream is not at the version the writer expected."""

    def __init__(self, stream_id: str, expected: int | None, actual: int) -> None:
        super().__init__(f"stream {stream_id}: expected version {expected}, but it is at {actual}")
        self.stream_id, self.expected, self.actual = stream_id, expected, actual


class InvalidEvent(StoreError):
    """An event that does not match its contract or its stream; nothing of its unit is written."""


class DuplicateMismatch(StoreError):
    """Some, not all, of a unit's event ids are stored already: not a redelivery of the same unit."""


class NotLeader(StoreError):
    """A fenced append from a session that no longer holds its leader lock; nothing is written."""

    def __init__(self, fence: Fence) -> None:
        super().__init__(
            f"advisory lock {fence.key} is no longer held by backend pid {fence.pid}"
            f" (session nonce {fence.nonce}): this replica is not the leader"
        )
        self.fence = fence
