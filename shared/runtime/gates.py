"""A leading service records the feature gates it runs with (`FeatureGatesObserved`), so the log
says which gates its decisions were taken under and a replay can weigh them by the same.

Recorded when it starts leading, only when they differ from what its stream last holds
(`shared.events.gates.differs`): appended at the version read, so of two replicas taking over
one after the other the second finds the first's record; a conflict means reading again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from shared.events.contracts import FeatureGatesObserved
from shared.events.envelope import NewEvent
from shared.events.gates import differs
from shared.runtime.ledger import Ledger
from shared.store.errors import ConcurrencyConflict, NotLeader
from shared.store.units import NO_STREAM, unit

ATTEMPTS = 3


async def record_gates(
    ledger: Ledger, service: str, gates: Mapping[str, bool], now: datetime, *, producer: str, log: Any
) -> bool:
    """Whether `gates` were appended to `service`'s stream (False: it holds them already). A
    failure other than losing the lead is logged on the service's `log`, not raised: deciding
    goes on without the record."""
    stream = FeatureGatesObserved.stream_of(service)
    event = FeatureGatesObserved(service=service, gates=dict(gates))
    for _ in range(ATTEMPTS):
        recorded = await ledger.store.read_stream(stream)
        last = recorded[-1].data.get("gates") if recorded else None
        if not differs(last, event.gates):
            return False
        version = recorded[-1].version if recorded else NO_STREAM
        appended = NewEvent.of(event, occurred_at=now, producer=producer)
        (result,) = await ledger.append_units([unit(stream, version, [appended])])
        if isinstance(result, ConcurrencyConflict):
            continue  # another replica recorded meanwhile: read again
        if isinstance(result, NotLeader):
            raise result
        if isinstance(result, BaseException):
            log.warning("%s not recorded: %s", FeatureGatesObserved.TYPE, result)
            return False
        return True
    log.warning("%s not recorded: its stream %s kept moving", FeatureGatesObserved.TYPE, stream)
    return False
