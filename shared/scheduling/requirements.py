"""Karpenter's requirements algebra (upstream's `pkg/scheduling/requirements.go`): node selector
requirements as value sets that can be intersected, and the two questions scheduling asks of
them, `intersects` and `compatible`. Each has a boolean twin (`conflicts`, `incompatible`) for the
callers that only ask whether there is a conflict: a consolidation pass asks millions of times,
and the lists' messages and intersected sets were most of its cost.

A requirement on one key is a set of values, or the complement of one (NotIn, Exists), with
optional integer bounds (Gt N is >= N+1, Lt N is <= N-1; Karpenter's Gte/Lte as written). A
bounded set admits only integers. Intersections: In with In is the common values, In with NotIn
the difference, NotIn with NotIn the union of what both exclude; crossed bounds leave nothing
(DoesNotExist); minValues takes the larger. Aliased keys (`beta.kubernetes.io/arch`...) mean
their stable label.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from shared.api.core import Operator, Requirement
from shared.api.labels import NORMALIZED_LABELS, WELL_KNOWN_LABELS
from shared.api.pod import NodeSelector

_BIG = 1 << 62  # "infinitely many values": the size of a complement set


@dataclass(frozen=True, slots=True)
class ValueSet:
    """The values one key may take."""

    key: str
    values: frozenset[str] = frozenset()
    complement: bool = False  # True: every value except `values`
    at_least: int | None = None
    at_most: int | None = None
    min_values: int | None = None
    present: bool = False  # a requirement asked for the label to exist (In, Exists, Gt...): a node without it fails

    @classmethod
    def of(cls, requirement: Requirement) -> ValueSet:
        key = NORMALIZED_LABELS.get(requirement.key, requirement.key)
        values = frozenset(requirement.values or ())
        op, m = requirement.operator, requirement.min_values
        if op == Operator.IN:
            return cls(key, values, False, min_values=m, present=True)
        if op == Operator.NOT_IN:
            return cls(key, values, True, min_values=m)
        if op == Operator.EXISTS:
            return cls(key, frozenset(), True, min_values=m, present=True)
        if op == Operator.DOES_NOT_EXIST:
            return cls(key, frozenset(), False, min_values=m)
        bound = int(next(iter(values)))
        if op == Operator.GT:
            return cls(key, frozenset(), True, at_least=bound + 1, min_values=m, present=True)
        if op == Operator.GTE:
            return cls(key, frozenset(), True, at_least=bound, min_values=m, present=True)
        if op == Operator.LT:
            return cls(key, frozenset(), True, at_most=bound - 1, min_values=m, present=True)
        return cls(key, frozenset(), True, at_most=bound, min_values=m, present=True)

    @classmethod
    def exactly(cls, key: str, value: str) -> ValueSet:
        return cls(NORMALIZED_LABELS.get(key, key), frozenset({value}), present=True)

    def _in_bounds(self, value: str) -> bool:
        return _within(value, self.at_least, self.at_most)

    def has(self, value: str) -> bool:
        return (value not in self.values if self.complement else value in self.values) and self._in_bounds(value)

    def __len__(self) -> int:
        if self.complement:
            return _BIG - len(self.values)
        return sum(1 for v in self.values if self._in_bounds(v))

    @property
    def empty(self) -> bool:
        """`len(self) == 0` without counting: a complement never is; a finite set is when its
        bounds admit none of its values."""
        if self.complement:
            return False
        if self.at_least is None and self.at_most is None:
            return not self.values
        return not any(self._in_bounds(v) for v in self.values)

    @property
    def operator(self) -> Operator:
        if self.complement:
            return Operator.NOT_IN if self.values else Operator.EXISTS
        return Operator.DOES_NOT_EXIST if self.empty else Operator.IN

    @property
    def negative(self) -> bool:
        """NotIn or DoesNotExist (as `operator` says), without building the operator."""
        return bool(self.values) if self.complement else self.empty

    def disjoint(self, other: ValueSet) -> bool:
        """`self.intersection(other).empty` without building the intersection: set operations
        on the values where no bound applies, which is nearly always."""
        at_least = _larger(self.at_least, other.at_least)
        at_most = _smaller(self.at_most, other.at_most)
        if at_least is not None and at_most is not None and at_least > at_most:
            return True  # crossed bounds leave nothing
        if self.complement and other.complement:
            return False
        if self.complement:
            finite, excluded = other.values, self.values
        elif other.complement:
            finite, excluded = self.values, other.values
        else:
            if at_least is None and at_most is None:
                return self.values.isdisjoint(other.values)
            finite, excluded = self.values & other.values, frozenset()
        if at_least is None and at_most is None:
            return finite <= excluded
        return not any(v not in excluded and _within(v, at_least, at_most) for v in finite)

    def intersection(self, other: ValueSet) -> ValueSet:
        at_least = _larger(self.at_least, other.at_least)
        at_most = _smaller(self.at_most, other.at_most)
        min_values = _larger(self.min_values, other.min_values)
        present = self.present or other.present
        if at_least is not None and at_most is not None and at_least > at_most:
            return ValueSet(self.key, frozenset(), False, min_values=min_values, present=present)  # crossed
        if self.complement and other.complement:
            values, complement = self.values | other.values, True
        elif self.complement:
            values, complement = other.values - self.values, False
        elif other.complement:
            values, complement = self.values - other.values, False
        else:
            values, complement = self.values & other.values, False
        out = ValueSet(self.key, frozenset(values), complement, at_least, at_most, min_values, present)
        if not complement:  # a finite set keeps only the values its bounds admit
            kept = frozenset(v for v in values if out._in_bounds(v))
            out = ValueSet(self.key, kept, False, min_values=min_values, present=present)
        return out

    def to_requirements(self) -> list[Requirement]:
        """The node selector requirements that say the same (bounds as Karpenter's Gte/Lte)."""
        out: list[Requirement] = []
        op = self.operator
        if op in (Operator.IN, Operator.NOT_IN):
            values = [v for v in sorted(self.values) if op == Operator.NOT_IN or self._in_bounds(v)]
            out.append(Requirement(key=self.key, operator=op, values=values, min_values=self.min_values))
        elif op == Operator.DOES_NOT_EXIST or (self.at_least is None and self.at_most is None):
            out.append(Requirement(key=self.key, operator=op, min_values=self.min_values))
        if self.complement and self.at_least is not None:
            out.append(Requirement(key=self.key, operator=Operator.GTE, values=[str(self.at_least)]))
        if self.complement and self.at_most is not None:
            out.append(Requirement(key=self.key, operator=Operator.LTE, values=[str(self.at_most)]))
        return out

    def __str__(self) -> str:
        shown = sorted(self.values)
        if self.at_least is not None or self.at_most is not None:
            return f"{self.key} {self.operator} {shown} >={self.at_least} <={self.at_most}"
        return f"{self.key} {self.operator} {shown}" if shown else f"{self.key} {self.operator}"


def _within(value: str, at_least: int | None, at_most: int | None) -> bool:
    """Whether bounds admit the value (none: any; some: only integers within them)."""
    if at_least is None and at_most is None:
        return True
    try:
        number = int(value)
    except ValueError:
        return False
    return (at_least is None or number >= at_least) and (at_most is None or number <= at_most)


def _larger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


class Requirements(Mapping[str, ValueSet]):
    """Requirements by key; adding one on a key already present intersects them."""

    __slots__ = ("_sets",)

    def __init__(self, sets: Iterable[ValueSet] = ()) -> None:
        self._sets: dict[str, ValueSet] = {}
        for value_set in sets:
            self.add(value_set)

    @classmethod
    def of(cls, requirements: Iterable[Requirement]) -> Requirements:
        return cls(ValueSet.of(r) for r in requirements)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """What a node (or an instance type's offering) with these labels offers: each value exactly."""
        return cls(ValueSet.exactly(k, v) for k, v in labels.items())

    def add(self, value_set: ValueSet) -> None:
        known = self._sets.get(value_set.key)
        self._sets[value_set.key] = value_set if known is None else known.intersection(value_set)

    def __getitem__(self, key: str) -> ValueSet:
        return self._sets[NORMALIZED_LABELS.get(key, key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sets)

    def __len__(self) -> int:
        return len(self._sets)

    def intersects(self, incoming: Requirements) -> list[str]:
        """Why no value satisfies both, per key they share (empty: they intersect). Two negative
        requirements (NotIn, DoesNotExist) never conflict."""
        errors = []
        for key in self._sets.keys() & incoming._sets.keys():
            existing, theirs = self._sets[key], incoming._sets[key]
            if existing.disjoint(theirs) and not (existing.negative and theirs.negative):
                errors.append(f"key {key}, {theirs} not in {existing}")
        return sorted(errors)

    def conflicts(self, incoming: Requirements) -> bool:
        """`bool(self.intersects(incoming))`, stopping at the first conflicting key and writing no
        message: for callers that only ask whether there is one."""
        mine, theirs = self._sets, incoming._sets
        if len(theirs) < len(mine):
            mine, theirs = theirs, mine  # the question is symmetric: walk the smaller
        for key, one in mine.items():
            other = theirs.get(key)
            if other is not None and one.disjoint(other) and not (one.negative and other.negative):
                return True
        return False

    def compatible(self, incoming: Requirements, allow_undefined: frozenset[str] = WELL_KNOWN_LABELS) -> list[str]:
        """Why `incoming` cannot be met by what these requirements describe (empty: it can). A key
        it asks for (In, Exists) that these leave undefined is refused, unless it is in
        `allow_undefined` (the well-known labels, by default); shared keys must intersect."""
        errors = [
            f'label "{key}" does not have known values'
            for key in sorted(incoming._sets.keys() - self._sets.keys())
            if not incoming._sets[key].negative and key not in allow_undefined
        ]
        return errors + self.intersects(incoming)

    def incompatible(self, incoming: Requirements, allow_undefined: frozenset[str] = WELL_KNOWN_LABELS) -> bool:
        """`bool(self.compatible(incoming, allow_undefined))`, without writing the reasons."""
        mine = self._sets
        for key, value_set in incoming._sets.items():
            if key not in mine and key not in allow_undefined and not value_set.negative:
                return True
        return self.conflicts(incoming)

    def labels_allowed(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with these labels satisfies every requirement (a missing label meets
        only NotIn and DoesNotExist)."""
        for key, value_set in self._sets.items():
            value = labels.get(key)
            if value is None:
                if value_set.present or not value_set.negative:
                    return False
            elif not value_set.has(value):
                return False
        return True


def selector_allows(selector: NodeSelector | None, labels: Mapping[str, str]) -> bool:
    """A pod's required node affinity: any term whose expressions all hold; none allows all."""
    if selector is None:
        return True
    return any(Requirements.of(t.match_expressions or ()).labels_allowed(labels) for t in selector.node_selector_terms)
