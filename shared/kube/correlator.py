"""What client-go's EventCorrelator does to an Event before it is written, as Karpenter's recorder
gets it from client-go: pure, time is a parameter.

- Aggregation (`EventAggregator`): once 10 Events about one object with one type and reason but
  different messages arrive within 10 minutes, the rest of that window are written as one Event,
  "(combined from similar events): <the latest message>", whose count goes up.
- Spam filter (`EventSourceObjectSpamFilter`): each object may take a burst of 25 Events, then one
  every 5 minutes; the rest are dropped.

Identical Events are counted up by the writer (`shared.adapters.kube.events`), as client-go's
EventLogger does.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.ports.cluster import KubeEvent

AGGREGATE_AFTER = 10
AGGREGATE_WINDOW = timedelta(minutes=10)
COMBINED = "(combined from similar events): "
SPAM_BURST = 25
SPAM_REFILL = timedelta(minutes=5)
KEPT = 4096
"""Objects and similar-Event groups remembered (client-go's LRU size)."""


@dataclass(frozen=True, slots=True)
class Correlated:
    """The Event to write, and the key the writer counts identical ones by (an aggregate's
    messages differ, but it is one Event)."""

    event: KubeEvent
    key: tuple[str, str, str, str]


@dataclass(slots=True)
class _Similar:
    started: datetime
    messages: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: datetime


class Correlator:
    def __init__(self) -> None:
        self._similar: OrderedDict[tuple[str, str, str, str], _Similar] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()

    def correlate(self, event: KubeEvent, now: datetime) -> Correlated | None:
        """The Event as it is to be written, or None when the spam filter drops it."""
        if not self._allowed((event.kind, event.key), now):
            return None
        similar_key = (event.kind, event.key, event.type, event.reason)
        similar = self._similar.get(similar_key)
        if similar is None or now - similar.started > AGGREGATE_WINDOW:
            similar = _Similar(now)
        self._keep(self._similar, similar_key, similar)
        similar.messages.add(event.message)
        if len(similar.messages) < AGGREGATE_AFTER:
            return Correlated(event, (*similar_key[:2], event.reason, event.message))
        combined = KubeEvent(event.kind, event.key, event.type, event.reason, COMBINED + event.message, event.uid)
        return Correlated(combined, (*similar_key[:2], event.reason, COMBINED))

    def _allowed(self, key: tuple[str, str], now: datetime) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(SPAM_BURST, now)
        else:
            refilled = (now - bucket.at) / SPAM_REFILL
            bucket.tokens, bucket.at = min(SPAM_BURST, bucket.tokens + refilled), now
        self._keep(self._buckets, key, bucket)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    @staticmethod
    def _keep(cache: OrderedDict, key: object, value: object) -> None:  # type: ignore[type-arg]
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > KEPT:
            cache.popitem(last=False)
