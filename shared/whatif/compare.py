"""The baseline held against the record (fidelity), and the change against the baseline.

Pure. A baseline replays the recorded demand with the recorded NodePools; it is faithful when,
per pool, its figures are within `TOLERANCES` of the record's. Beyond one, the figure is named
with the likely cause (the replay decides the cloud's random picks, a reclaimed instance, the
timing of a pass, again), rather than hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.whatif.figures import UNPLACED, Figures
from shared.whatif.sim import UNKNOWN, SimSettings


@dataclass(frozen=True)
class Tolerance:
    relative: float
    absolute: float
    why: str

    def holds(self, recorded: float, replayed: float) -> bool:
        return abs(replayed - recorded) <= max(self.absolute, self.relative * abs(recorded))


TOLERANCES: dict[str, Tolerance] = {
    "node_hours": Tolerance(
        0.15, 1.0, "nodes launch and go on the runner's 10 s steps, not each service's own cadence"
    ),
    "peak_nodes": Tolerance(0.0, 1.0, "a pass that batches pods a step apart can plan one claim more or fewer"),
    "disruptions": Tolerance(
        0.25,
        1.0,
        "consolidation follows the pods' placement, which the replayed kube-scheduler decides again",
    ),
}
"""Per figure: within max(absolute, relative x recorded) of the record is faithful."""


def fidelity(
    recorded: Mapping[str, Figures], baseline: Mapping[str, Figures], sim: SimSettings = UNKNOWN
) -> dict[str, Any]:
    """Per pool and figure: the record, the replay, within or not; the figures beyond; and the
    sim seed the baseline played at, with where it came from (`sim`): a replay at another seed
    than the record's prices otherwise, so its consolidation may differ beyond any tolerance."""
    pools: dict[str, Any] = {}
    beyond: list[str] = []
    for pool in sorted((set(recorded) | set(baseline)) - {UNPLACED}):
        r, b = recorded.get(pool, Figures()), baseline.get(pool, Figures())
        rows = {
            "node_hours": (r.node_hours, b.node_hours),
            "peak_nodes": (float(r.peak_nodes), float(b.peak_nodes)),
        }
        for reason in sorted(set(r.disruptions) | set(b.disruptions)):
            rows[f"disruptions.{reason}"] = (float(r.disruptions.get(reason, 0)), float(b.disruptions.get(reason, 0)))
        out = {}
        for figure, (was, now) in rows.items():
            tolerance = TOLERANCES[figure.split(".")[0]]
            within = tolerance.holds(was, now)
            out[figure] = {"recorded": round(was, 3), "replayed": round(now, 3), "within": within}
            if not within:
                beyond.append(f"{pool} {figure}: recorded {was:g}, replayed {now:g}: {tolerance.why}")
        pools[pool] = out
    return {
        "faithful": not beyond,
        "seed": sim.to_dict(),
        "tolerances": {k: {"relative": t.relative, "absolute": t.absolute} for k, t in TOLERANCES.items()},
        "pools": pools,
        "beyond": beyond,
    }


def difference(baseline: Mapping[str, Figures], changed: Mapping[str, Figures]) -> dict[str, dict[str, Any]]:
    """Per pool, changed minus baseline for every number (by reason and cause for the counts)."""
    out: dict[str, dict[str, Any]] = {}
    for pool in sorted(set(baseline) | set(changed)):
        b, c = baseline.get(pool, Figures()).to_dict(), changed.get(pool, Figures()).to_dict()
        delta: dict[str, Any] = {}
        for key, value in c.items():
            if isinstance(value, dict):
                keys = set(value) | set(b[key])
                delta[key] = {k: value.get(k, 0) - b[key].get(k, 0) for k in sorted(keys)}
            else:
                delta[key] = round(value - b[key], 4)
        out[pool] = delta
    return out
