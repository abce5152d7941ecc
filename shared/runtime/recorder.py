"""Kubernetes Events from the services, deduplicated as Karpenter's recorder does.

Karpenter publishes an event of one reason about one object (by its uid) at most once per window
(2 minutes by default), whatever its message, so a pod that stays unschedulable through many
passes does not flood the API server. The window runs on the shared clock. Events are best
effort and never hold a pass up: they go out a few at a time, and once the cluster fails to take
one, the rest wait for the next pass (they are not counted as sent).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

import nats.errors

from shared.ports.cluster import Cluster, ClusterError, KubeEvent

DEDUPE = timedelta(minutes=2)
AT_ONCE = 16
log = logging.getLogger("nodewright.events")


class Recorder:
    def __init__(self, cluster: Cluster | None, window: timedelta = DEDUPE, kept: int = 50_000) -> None:
        self.cluster = cluster
        self.window = window
        self.kept = kept
        self._last: dict[tuple[str, str, str], datetime] = {}

    @staticmethod
    def _key(event: KubeEvent) -> tuple[str, str, str]:
        return (event.kind, event.uid or event.key, event.reason)

    def due(self, event: KubeEvent, now: datetime) -> bool:
        """Whether the event is new, or its window has passed (then it counts as sent)."""
        key = self._key(event)
        last = self._last.get(key)
        if last is not None and now - last < self.window:
            return False
        self._last.pop(key, None)
        self._last[key] = now
        if len(self._last) > self.kept:
            del self._last[next(iter(self._last))]
        return True

    async def publish(self, events: list[KubeEvent], now: datetime) -> int:
        """Send the events that are due, AT_ONCE at a time; how many were sent."""
        if self.cluster is None:
            return 0
        due = [e for e in events if self.due(e, now)]
        sent = 0
        for start in range(0, len(due), AT_ONCE):
            chunk = due[start : start + AT_ONCE]
            results = await asyncio.gather(*(self.cluster.record_event(e) for e in chunk), return_exceptions=True)
            failed = [(e, r) for e, r in zip(chunk, results, strict=True) if isinstance(r, BaseException)]
            sent += len(chunk) - len(failed)
            for event, error in failed:
                if not isinstance(error, ClusterError | nats.errors.Error | TimeoutError | OSError):
                    raise error
                self._last.pop(self._key(event), None)
            if failed:
                log.warning("%d events not recorded (%r); the rest wait for the next pass", len(failed), failed[0][1])
                for event in due[start + AT_ONCE :]:
                    self._last.pop(self._key(event), None)
                break
        return sent
