"""The small questions a pass asks of a pod and a place: taints, zone pins, minValues, room.

Kept apart from `packing` so the claim index (`candidates`) asks them exactly as the pass does
without importing the pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from enum import StrEnum
from typing import Protocol

from shared.api.core import Taint, TaintEffect, Toleration
from shared.api.labels import ZONE_LABEL
from shared.scheduling.offerings import Option
from shared.scheduling.requirements import Requirements, ValueSet

ZERO = Decimal(0)


class MinValuesPolicy(StrEnum):
    """Upstream's `--min-values-policy`: Strict refuses a claim whose types cannot meet a
    minValues; BestEffort lowers the minValues to what they meet and says so on the claim."""

    STRICT = "Strict"
    BEST_EFFORT = "BestEffort"


def tolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint], soft: bool = False) -> str | None:
    """Why the tolerations do not tolerate the taints (None: they do). PreferNoSchedule taints
    count only with `soft` (a pod not yet relaxed of them, `preferences.relax`)."""
    for taint in taints:
        if (soft or taint.effect != TaintEffect.PREFER_NO_SCHEDULE) and not any(
            t.tolerates(taint) for t in tolerations
        ):
            return f"did not tolerate {taint.key}={taint.value or ''}:{taint.effect}"
    return None


class _Pinnable(Protocol):
    requirements: Requirements
    zone_set: frozenset[str]


def pinned_to(claim: _Pinnable, zones: list[str]) -> bool:
    """Whether the claim is pinned already to the zone the rules would pick for it."""
    pinned = claim.requirements.get(ZONE_LABEL)
    if pinned is None or pinned.complement or len(pinned.values) != 1:
        return False
    best = next((z for z in zones if z in claim.zone_set), None)
    return best is not None and best in pinned.values


def pin(requirements: Requirements, zones: list[str] | None, offered: Iterable[str]) -> bool:
    """Pin the requirements to the best zone the rules allow and the options offer; False if none."""
    if zones is None:
        return True
    offered = set(offered)
    zone = next((z for z in zones if z in offered), None)
    if zone is None:
        return False
    requirements.add(ValueSet.exactly(ZONE_LABEL, zone))
    return True


class _Requesting(Protocol):
    """A pod as `with_pod` sees it (`values.PendingPod`): this module sits below the values."""

    @property
    def requests(self) -> Mapping[str, Decimal]: ...


def with_pod(used: Mapping[str, Decimal], pod: _Requesting) -> dict[str, Decimal]:
    """`used` with the pod's requests and one pod more."""
    out = dict(used)
    for name, value in pod.requests.items():
        out[name] = out.get(name, ZERO) + value
    out["pods"] = out.get("pods", ZERO) + 1
    return out


def min_values_met(requirements: Requirements, options: Iterable[Option], used: Mapping[str, Decimal]) -> bool:
    """Strict minValues (the default): every requirement that asks for N distinct values of
    its label has them among the types that still hold the claim's pods."""
    asked = [(key, v.min_values) for key, v in requirements.items() if v.min_values]
    if not asked:
        return True
    holding = [o for o in options if o.holds(used)]
    return all(len({o.instance.labels.get(key) for o in holding} - {None}) >= n for key, n in asked)


def met_min_values(requirements: Requirements, options: Iterable[Option], used: Mapping[str, Decimal]) -> Requirements:
    """BestEffort: the requirements with each minValues its holding options cannot meet lowered
    to the number of values they do offer (upstream's `SatisfiesMinValues` counts); the same
    object when every minValues is met."""
    asked = [(key, v) for key, v in requirements.items() if v.min_values]
    holding = [o for o in options if o.holds(used)]
    lowered = {}
    for key, value_set in asked:
        offered = len({o.instance.labels.get(key) for o in holding} - {None})
        if value_set.min_values is not None and offered < value_set.min_values:
            lowered[key] = replace(value_set, min_values=offered or None)
    if not lowered:
        return requirements
    return Requirements(lowered.get(key, v) for key, v in requirements.items())


def within(used: Mapping[str, Decimal], requests: Mapping[str, Decimal], room: Mapping[str, Decimal]) -> bool:
    """Whether `room` has space for one pod more with these requests on top of `used`."""
    if used.get("pods", ZERO) + 1 > room.get("pods", ZERO):
        return False
    return all(used.get(k, ZERO) + v <= room.get(k, ZERO) for k, v in requests.items())
