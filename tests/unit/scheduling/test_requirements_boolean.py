"""The boolean questions (`conflicts`, `incompatible`, `ValueSet.empty`, `disjoint`, `negative`)
answer as the message-building ones do: they replaced those on the hot path, so any
disagreement would change which types, pools and claims a pod may use."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.core import Operator, Requirement
from shared.api.labels import ARCH_LABEL, ZONE_LABEL
from shared.scheduling.requirements import Requirements, ValueSet

# a custom key, a well-known one and an alias of another well-known one (normalized by `of`)
KEYS = ["example.com/size", ZONE_LABEL, "beta.kubernetes.io/arch", ARCH_LABEL]
VALUES = ["1", "2", "3", "4", "a", "b"]
BOUNDS = ["0", "1", "2", "3", "4", "5"]
OPS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]


@st.composite
def requirements_lists(draw: st.DrawFn) -> list[Requirement]:
    """Up to five requirements over few keys, so the same key often comes back and `add`
    intersects it (bounds crossed, sets emptied, minValues raised)."""
    out = []
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(OPS))
        if op in ("Gt", "Lt", "Gte", "Lte"):
            values: list[str] | None = [draw(st.sampled_from(BOUNDS))]
        elif op in ("In", "NotIn"):
            values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=4))
        else:
            values = None
        min_values = draw(st.one_of(st.none(), st.integers(1, 3)))
        out.append(Requirement(key=draw(st.sampled_from(KEYS)), operator=op, values=values, min_values=min_values))
    return out


@st.composite
def requirement_sets(draw: st.DrawFn) -> Requirements:
    """Requirements as pods and pools write them, or as a node's (or a type's) labels offer them."""
    if draw(st.booleans()):
        return Requirements.of(draw(requirements_lists()))
    labels = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3))
    return Requirements.from_labels(labels)


@st.composite
def raw_value_sets(draw: st.DrawFn) -> ValueSet:
    """Any field combination the dataclass allows, bounds on a finite set included (no
    constructor makes one, but `empty` and `disjoint` must still agree with counting)."""
    return ValueSet(
        "k",
        frozenset(draw(st.lists(st.sampled_from(VALUES), max_size=4))),
        draw(st.booleans()),
        draw(st.one_of(st.none(), st.integers(0, 5))),
        draw(st.one_of(st.none(), st.integers(0, 5))),
        draw(st.one_of(st.none(), st.integers(1, 3))),
        draw(st.booleans()),
    )


@settings(max_examples=300, deadline=None)
@given(requirement_sets(), requirement_sets())
def test_conflicts_agrees_with_intersects(a, b):
    assert a.conflicts(b) == bool(a.intersects(b))
    assert b.conflicts(a) == bool(b.intersects(a))


@settings(max_examples=300, deadline=None)
@given(requirement_sets(), requirement_sets(), st.booleans())
def test_incompatible_agrees_with_compatible(a, b, well_known_allowed):
    if well_known_allowed:
        assert a.incompatible(b) == bool(a.compatible(b))
    else:
        assert a.incompatible(b, frozenset()) == bool(a.compatible(b, frozenset()))


@settings(max_examples=300, deadline=None)
@given(raw_value_sets(), raw_value_sets())
def test_empty_disjoint_and_negative_agree_with_counting(a, b):
    both = a.intersection(b)
    assert a.empty == (len(a) == 0)
    assert both.empty == (len(both) == 0)
    assert a.disjoint(b) == both.empty == b.disjoint(a)
    assert a.negative == (a.operator in (Operator.NOT_IN, Operator.DOES_NOT_EXIST))


def test_examples_of_each_answer():
    """A few known answers, so the properties above are not only self-consistent."""
    zone_a = Requirements.from_labels({ZONE_LABEL: "a"})
    assert zone_a.conflicts(Requirements.of([Requirement(key=ZONE_LABEL, operator="In", values=["b"])]))
    assert not zone_a.conflicts(Requirements.of([Requirement(key=ZONE_LABEL, operator="NotIn", values=["b"])]))
    two = Requirements.from_labels({"example.com/size": "2"})
    assert two.conflicts(Requirements.of([Requirement(key="example.com/size", operator="Gt", values=["2"])]))
    assert not two.conflicts(Requirements.of([Requirement(key="example.com/size", operator="Lt", values=["3"])]))
    negatives = Requirements.of([Requirement(key="k", operator="NotIn", values=["a"])])
    assert not negatives.conflicts(Requirements.of([Requirement(key="k", operator="DoesNotExist")]))
    assert zone_a.incompatible(Requirements.of([Requirement(key="team", operator="Exists")]))
    assert not zone_a.incompatible(Requirements.of([Requirement(key="team", operator="DoesNotExist")]))
    assert ValueSet("k", frozenset({"a", "7"}), at_least=5).empty is False
    assert ValueSet("k", frozenset({"a", "3"}), at_least=5).empty is True
