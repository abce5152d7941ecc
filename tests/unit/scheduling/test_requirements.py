"""The requirements algebra: intersections, intersects, compatible, bounds, aliases (upstream's `pkg/scheduling/requirements.go`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.core import Requirement
from shared.scheduling.requirements import Requirements, ValueSet

K = "example.com/size"


def r(op: str, *values: str, key: str = K, min_values: int | None = None) -> Requirement:
    return Requirement(key=key, operator=op, values=list(values) or None, min_values=min_values)


def vs(op: str, *values: str, **kw) -> ValueSet:
    return ValueSet.of(r(op, *values, **kw))


@pytest.mark.parametrize(
    ("a", "b", "operator", "values"),
    [
        (vs("In", "a", "b"), vs("In", "b", "c"), "In", {"b"}),
        (vs("In", "a", "b"), vs("NotIn", "b"), "In", {"a"}),
        (vs("NotIn", "a"), vs("NotIn", "b"), "NotIn", {"a", "b"}),
        (vs("Exists"), vs("In", "x"), "In", {"x"}),
        (vs("In", "a"), vs("In", "b"), "DoesNotExist", set()),
        (vs("DoesNotExist"), vs("Exists"), "DoesNotExist", set()),
        (vs("In", "1", "5", "9"), vs("Gt", "4"), "In", {"5", "9"}),
        (vs("In", "1", "x"), vs("Lt", "3"), "In", {"1"}),  # bounds admit only integers
        (vs("Gt", "5"), vs("Lt", "3"), "DoesNotExist", set()),  # crossed bounds
        (vs("Gte", "3"), vs("Lte", "3"), "Exists", set()),  # the single value 3, as a bounded complement
    ],
)
def test_intersections(a, b, operator, values):
    both = a.intersection(b)
    assert both.operator == operator
    if not both.complement:
        assert set(both.values) == values
    assert both == b.intersection(a) or both.operator == b.intersection(a).operator


def test_gt_lt_gte_lte_bounds():
    assert vs("Gt", "4").has("5") and not vs("Gt", "4").has("4") and not vs("Gt", "4").has("five")
    assert vs("Lt", "4").has("3") and not vs("Lt", "4").has("4")
    assert vs("Gte", "4").has("4") and vs("Lte", "4").has("4")
    assert vs("Gte", "3").intersection(vs("Lte", "3")).has("3") and not vs("Gte", "3").intersection(vs("Lte", "3")).has(
        "4"
    )


def test_min_values_takes_the_larger():
    assert vs("In", "a", "b", "c", min_values=2).intersection(vs("In", "a", "b", min_values=3)).min_values == 3


def test_two_negative_requirements_always_intersect():
    assert Requirements.of([r("NotIn", "a")]).intersects(Requirements.of([r("DoesNotExist")])) == []
    assert Requirements.of([r("In", "a")]).intersects(Requirements.of([r("In", "b")])) != []
    assert Requirements.of([r("In", "a")]).intersects(Requirements.of([r("In", "a", "b")])) == []
    assert Requirements.of([r("In", "a")]).intersects(Requirements.of([r("In", "b", key="other")])) == []


def test_compatible_refuses_undefined_custom_labels_but_allows_well_known_ones():
    offered = Requirements.from_labels({"kubernetes.io/arch": "amd64"})
    assert offered.compatible(Requirements.of([r("In", "a", key="team")])) == [
        'label "team" does not have known values'
    ]
    assert offered.compatible(Requirements.of([r("NotIn", "a", key="team")])) == []
    assert offered.compatible(Requirements.of([r("In", "spot", key="karpenter.sh/capacity-type")])) == []
    assert offered.compatible(Requirements.of([r("In", "arm64", key="kubernetes.io/arch")])) != []


def test_aliased_keys_mean_the_stable_label():
    offered = Requirements.from_labels({"topology.kubernetes.io/zone": "zone-a"})
    alias = Requirements.of([r("In", "zone-b", key="failure-domain.beta.kubernetes.io/zone")])
    assert offered.intersects(alias) != []
    assert "topology.kubernetes.io/zone" in alias


def test_labels_allowed_treats_a_missing_label_as_meeting_only_negative_requirements():
    reqs = Requirements.of([r("NotIn", "a"), r("DoesNotExist", key="gone"), r("Exists", key="here")])
    assert reqs.labels_allowed({"here": "x"})
    assert not reqs.labels_allowed({"here": "x", K: "a"})
    assert not reqs.labels_allowed({})


OPS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
VALUES = ["1", "2", "3", "4", "a", "b"]


@st.composite
def value_sets(draw):
    op = draw(st.sampled_from(OPS))
    if op in ("Gt", "Lt", "Gte", "Lte"):
        values = [draw(st.sampled_from(["0", "1", "2", "3", "4", "5"]))]
    elif op in ("In", "NotIn"):
        values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=4))
    else:
        values = []
    return vs(op, *values)


@settings(max_examples=500, deadline=None)
@given(value_sets(), value_sets(), st.sampled_from(VALUES))
def test_an_intersection_admits_exactly_what_both_admit(a, b, value):
    assert a.intersection(b).has(value) == (a.has(value) and b.has(value))


@settings(max_examples=300, deadline=None)
@given(value_sets(), value_sets(), st.sampled_from([*VALUES, None]))
def test_requirements_on_one_key_allow_a_label_when_each_does(a, b, value):
    labels = {} if value is None else {K: value}
    both = Requirements([a, b])
    each = Requirements([a]).labels_allowed(labels) and Requirements([b]).labels_allowed(labels)
    assert both.labels_allowed(labels) == each


@settings(max_examples=300, deadline=None)
@given(value_sets(), value_sets(), st.sampled_from(VALUES))
def test_a_value_set_written_back_as_requirements_admits_the_same_values(a, b, value):
    both = a.intersection(b)
    again = Requirements.of(both.to_requirements())
    labels = {K: value}
    assert again.labels_allowed(labels) == Requirements([both]).labels_allowed(labels)
