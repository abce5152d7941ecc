"""The recorded run's sim settings a replay needs to be faithful, and where they came from.

The log records what the services did, not the scenario's `seed`, which draws the sim catalog's
prices (and the cloud's instance ids and the instances a reclaim picks): a replay at another seed
prices differently, so a consolidation that turned on a price turns otherwise. `nodewright run`
describes each run's database with them (`RUN_KEY`); an exported file does not carry them, so
there the user gives `--seed`, or the replay assumes 0 and says it did.

Pure: a description (any JSON) in, the settings and their provenance out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RUN_KEY = "sim"
"""The key of a run's description (`shared.runtime.runs`) holding `{seed, instanceTypes, zones}`."""
UNKNOWN_FROM = "unknown: the log does not record the run's seed (give --seed N); 0 assumed"


@dataclass(frozen=True)
class SimSettings:
    """The scenario's `seed` and, when known, its catalog's size and zones."""

    seed: int = 0
    source: str = UNKNOWN_FROM
    known: bool = False
    instance_types: int | None = None
    zones: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """What the fidelity section (`--output json`) tells of the seed."""
        return {"value": self.seed, "from": self.source, "known": self.known}

    def told(self) -> str:
        return f"sim seed {self.seed} ({self.source})"

    def given(self, seed: int | None) -> SimSettings:
        """These settings with the seed the user gave (`--seed`; None: these), the catalog's size
        and zones kept; a seed unlike a known one says what the source said."""
        if seed is None:
            return self
        source = "--seed" if not self.known or seed == self.seed else f"--seed ({self.source} says {self.seed})"
        return SimSettings(seed, source, True, self.instance_types, self.zones)


UNKNOWN = SimSettings()


def described(seed: int, instance_types: int, zones: Sequence[str]) -> dict[str, Any]:
    """The settings as `nodewright run` writes them in a run's description, under `RUN_KEY`."""
    return {"seed": seed, "instanceTypes": instance_types, "zones": list(zones)}


def from_description(description: Any, where: str) -> SimSettings:
    """The settings a run's description holds (`where`: the run, for the provenance); a
    description without them (a run made before they were written, a database `up` made) or
    with a malformed one is unknown, and says so."""
    sim = description.get(RUN_KEY) if isinstance(description, Mapping) else None
    if not isinstance(sim, Mapping) or type(sim.get("seed")) is not int:
        return SimSettings(source=f"unknown: {where}'s description does not record the seed (give --seed N); 0 assumed")
    count = sim.get("instanceTypes")
    zones = sim.get("zones")
    good_zones = isinstance(zones, list) and zones and all(isinstance(z, str) and z for z in zones)
    return SimSettings(
        sim["seed"],
        f"{where}'s description",
        True,
        count if type(count) is int and count >= 1 else None,
        tuple(zones) if good_zones else (),
    )
