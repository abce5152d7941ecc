"""Which feature gates a replay weighs a recorded run by: those the log recorded in force at its
instant (`shared.events.gates.in_force`, the disruption service's), else, for a log older than
that record, the fallback the caller gives (the environment's); and a line saying which."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.config import FEATURE_GATES
from shared.events.envelope import Entry
from shared.events.gates import in_force

LOG = "log"
ENVIRONMENT = "environment"
DEFAULTS = "defaults"
GIVEN = "given"
FROM_ENVIRONMENT = "the environment (NODEWRIGHT_FEATURE_GATES): the log records none"
FROM_DEFAULTS = "upstream's defaults: the log records none"


@dataclass(frozen=True, slots=True)
class Used:
    gates: dict[str, bool]
    """Every gate nodewright knows, on or off."""
    source: str
    """`log`, `environment`, `defaults` or `given`."""
    told: str
    """Where they came from, in words."""

    def on(self) -> list[str]:
        """The gates on, by upstream's names, in `FEATURE_GATES`' order."""
        return [name for name in FEATURE_GATES if self.gates.get(name)]

    def to_dict(self) -> dict[str, object]:
        return {"on": self.on(), "source": self.source, "from": self.told}


def given(gates: Mapping[str, bool]) -> Used:
    return Used({**FEATURE_GATES, **gates}, GIVEN, "given by the caller")


def used(
    entries: Sequence[Entry],
    at: datetime | None,
    fallback: Callable[[], Mapping[str, bool]],
    source: str = ENVIRONMENT,
) -> Used:
    """The gates in force at `at` as the log recorded them; none recorded, `fallback()` (`source`:
    `environment` or `defaults`; read only then, so a bad environment does not stop a replay
    that does not need it). A recorded gate this nodewright does not know is left out."""
    recorded = in_force(entries, at)
    if recorded is not None:
        known = {name: value for name, value in recorded.gates.items() if name in FEATURE_GATES}
        return Used({**FEATURE_GATES, **known}, LOG, recorded.told())
    told = FROM_ENVIRONMENT if source == ENVIRONMENT else FROM_DEFAULTS
    return Used({**FEATURE_GATES, **fallback()}, source, told)
