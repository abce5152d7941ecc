"""The feature gates a log records (`FeatureGatesObserved`): when a service records them again,
and which were in force at an instant, so a replay weighs a run by the gates it had.

Pure: recorded entries (anything with `type`, `data` and `occurred_at`, in log order) in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from shared.events.contracts.settings import FeatureGatesObserved
from shared.events.envelope import Entry

REPLAYED = "disruption"
"""The service whose gates explain and the what-if weigh by: they replay its passes."""


def differs(last: Mapping[str, bool] | None, now: Mapping[str, bool]) -> bool:
    """Whether a service records `now`: its stream holds none yet, or `last` differs in any gate
    (one turned, or one nodewright did not know when `last` was recorded). Equal ones are not
    recorded again, so a restart or a change of leader adds nothing to the log."""
    return last is None or dict(last) != dict(now)


@dataclass(frozen=True, slots=True)
class Recorded:
    """Gates as a service recorded them, and when."""

    gates: dict[str, bool]
    at: datetime
    later: bool
    """Recorded only after the instant asked about: the first record is taken for it."""

    def told(self) -> str:
        """Where they came from, for an answer to say."""
        if self.later:
            return f"the log: recorded at {self.at.isoformat()}, the first record, after the instant replayed"
        return f"the log: recorded at {self.at.isoformat()}"


def in_force(entries: Iterable[Entry], at: datetime | None, service: str = REPLAYED) -> Recorded | None:
    """The gates `service` last recorded by `at` (None: the log's end). Recorded none by then,
    the first it recorded: a service records them when it starts leading, a moment after a run's
    first facts. None when the log records none of it (a log older than the fact)."""
    first: Recorded | None = None
    last: Recorded | None = None
    for e in entries:
        if e.type != FeatureGatesObserved.TYPE or e.data.get("service") != service:
            continue
        gates = {str(k): bool(v) for k, v in (e.data.get("gates") or {}).items()}
        if at is None or e.occurred_at <= at:
            last = Recorded(gates, e.occurred_at, later=False)
        elif first is None:
            first = Recorded(gates, e.occurred_at, later=True)
    return last if last is not None else first
