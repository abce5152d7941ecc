"""Resource quantities as the counters keep them: exact decimals, shared between equal capacity
maps (a log repeats a few instance types' capacities millions of times), and formatted back in
Kubernetes' notation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from shared.api.quantity import format_quantity, parse

quantity = parse
"""A quantity's exact value (`parse` memoises the texts it has seen)."""


def resources_of(raw: Mapping[str, str]) -> Mapping[str, Decimal]:
    """The quantities of a capacity map. Shared between equal maps: read it, never change it.

    Memoised by the map's items: a log repeats the same few instance-type capacities millions of
    times. A plain dict, not `lru_cache`: this runs twice per claim in a replay, and the wrapper
    cost as much as the lookup."""
    key = tuple(raw.items())
    known = _RESOURCES.get(key)
    if known is None:
        if len(_RESOURCES) >= 4096:
            _RESOURCES.clear()
        known = _RESOURCES[key] = {name: quantity(str(value)) for name, value in key}
    return known


_RESOURCES: dict[tuple[tuple[str, str], ...], Mapping[str, Decimal]] = {}


def format_resources(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: format_quantity(value, binary=name in _BINARY) for name, value in sorted(values.items())}


_BINARY = frozenset({"memory", "ephemeral-storage", "storage"})


def largest_capacity(instance_types: Sequence[Mapping[str, Any]]) -> Mapping[str, Decimal]:
    """Per resource, the largest capacity among the options (upstream's pessimistic subtractMax).
    Read it, never change it: with one option it is that option's shared map (`resources_of`)."""
    if isinstance(instance_types, list) and len(instance_types) == 1:
        return resources_of(instance_types[0]["capacity"])
    out: dict[str, Decimal] = {}
    for option in instance_types:
        for name, value in resources_of(option["capacity"]).items():
            if name not in out or value > out[name]:
                out[name] = value
    return out
