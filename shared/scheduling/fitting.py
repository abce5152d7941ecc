"""What requirements leave of a claim's options, remembered for one pass.

A pass asks the same few questions thousands of times (which instance types a set of label
requirements allows, each option narrowed to the zones and capacity types allowed), so `Fitting`
answers each distinct question once. Split from `packing` so the pass and its claim index
(`candidates`) share it without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

from shared.api.labels import CAPACITY_TYPE_LABEL, ZONE_LABEL
from shared.scheduling.offerings import InstanceOption, Option
from shared.scheduling.requirements import Requirements, ValueSet

_ZERO = Decimal(0)


def largest(options: Iterable[Option]) -> dict[str, Decimal]:
    """Per resource, the most room any of the options has."""
    out: dict[str, Decimal] = {}
    for option in options:
        for name, value in option.room.items():
            if value > out.get(name, _ZERO):
                out[name] = value
    return out


class Fitting:
    """Answers for one pass: which instance types each distinct set of label requirements
    allows, each option narrowed to the zones and capacity types allowed, and the answers for
    each list of options it was given (lists are never changed in place)."""

    def __init__(self, catalog: Sequence[InstanceOption]) -> None:
        self.catalog = catalog
        self.label_keys = {key for it in catalog for key in it.labels}
        self._allowed: dict[tuple[ValueSet, ...], frozenset[str]] = {}
        self._narrowed: dict[tuple[ValueSet | None, ValueSet | None], dict[int, Option | None]] = {}
        self._answers: dict[
            tuple[int, frozenset[str] | None, ValueSet | None, ValueSet | None], tuple[list[Option], list[Option]]
        ] = {}  # each answer keeps the list it was asked about alive, so its id is never reused
        self._derived: dict[int, tuple[list[Option], dict[str, Decimal], frozenset[str]]] = {}

    def allowed(self, requirements: Requirements) -> frozenset[str] | None:
        """Names of the types whose labels these requirements allow; None: all of them."""
        relevant = tuple(sorted((v for k, v in requirements.items() if k in self.label_keys), key=lambda v: v.key))
        if not relevant:
            return None
        names = self._allowed.get(relevant)
        if names is None:
            wanted = Requirements(relevant)
            names = frozenset(it.name for it in self.catalog if not it.requirements.conflicts(wanted))
            self._allowed[relevant] = names
        return names

    def __call__(self, options: list[Option], requirements: Requirements) -> list[Option]:
        """The options whose type and offers the requirements allow."""
        names = self.allowed(requirements)
        zones, types = requirements.get(ZONE_LABEL), requirements.get(CAPACITY_TYPE_LABEL)
        key = (id(options), names, zones, types)
        hit = self._answers.get(key)
        if hit is not None and hit[0] is options:
            return hit[1]
        fitting = [o for o in options if names is None or o.instance.name in names]
        if zones is not None or types is not None:
            cache = self._narrowed.setdefault((zones, types), {})
            out = []
            for option in fitting:
                narrowed = cache.get(id(option), option)
                if narrowed is option and id(option) not in cache:
                    narrowed = cache[id(option)] = narrow(option, zones, types)
                if narrowed is not None:
                    out.append(narrowed)
            fitting = out
        self._answers[key] = (options, fitting)
        self.derived(fitting)
        return fitting

    def derived(self, options: list[Option]) -> tuple[dict[str, Decimal], frozenset[str]]:
        """The largest room per resource and the zones of a list of options."""
        known = self._derived.get(id(options))
        if known is None or known[0] is not options:
            zones = frozenset().union(*(o.zones for o in options)) if options else frozenset()
            known = self._derived[id(options)] = (options, largest(options), zones)
        return known[1], known[2]


def narrow(option: Option, zones: ValueSet | None, types: ValueSet | None) -> Option | None:
    """The option with only the offers these zones and capacity types allow; None if none is."""
    offers = tuple(
        o
        for o in option.offers
        if (zones is None or zones.has(o.zone)) and (types is None or types.has(o.capacity_type))
    )
    if not offers:
        return None
    return option if offers == option.offers else Option(option.instance, offers, option.room)
