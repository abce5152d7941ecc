"""Arbitrary YAML never crashes the validator: it yields a result or a clean DocumentError."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.documents import DocumentError, validate_text
from shared.api.validation import validate_nodepool
from tests.conftest import nodepool_doc

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=25,
)
SPEC_KEYS = [
    "template",
    "disruption",
    "limits",
    "weight",
    "budgets",
    "nodes",
    "schedule",
    "requirements",
    "taints",
]


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_any_document_yields_clean_errors(document):
    result = validate_nodepool(document)
    for error in result.errors:
        assert isinstance(error.path, str)
        assert isinstance(error.message, str) and error.message


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SPEC_KEYS), json_like, st.sampled_from(["spec", "spec.template.spec", "spec.disruption"]))
def test_mutated_nodepools_yield_clean_errors(key, value, where):
    doc = nodepool_doc()
    node = doc
    for part in where.split("."):
        node = node[part]
    node[key] = value
    result = validate_nodepool(doc)
    assert result.valid == (not result.errors)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_result_or_a_document_error(text):
    try:
        validate_text(text)
    except DocumentError as exc:
        assert str(exc)


def test_yaml_round_trip_of_fuzzed_dict_never_raises():
    text = yaml.safe_dump({"kind": "NodePool", "spec": {"template": 1}})
    (result,) = validate_text(text)
    assert not result.valid
