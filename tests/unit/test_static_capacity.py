"""Static NodePools (`spec.replicas`, gate `StaticCapacity`; docs/static-capacity.md): upstream's
rules and the gate, how many claims a pool lacks and what one is, the scale-down's order, that
consolidation leaves a static pool alone, and the audit's re-check of a scale-down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.api.documents import validate_api_text
from shared.api.validation import (
    STATIC_LIMITS,
    STATIC_TRANSITION,
    STATIC_WEIGHT,
    transition_errors,
    validate_nodepool,
)
from shared.config import FEATURE_GATES, STATIC_CAPACITY, feature_gates
from shared.disruption.static import REASON, scale_down
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.audit import replay
from shared.policy.overlimit import ClaimFacts
from shared.policy.pods import PodFacts
from shared.scheduling.offerings import InstanceOption, Offer, pool_options
from shared.scheduling.requirements import Requirements
from shared.scheduling.static import StaticNeed, static_claim, static_needs
from shared.scheduling.values import PoolTemplate
from tests.conftest import nodepool_doc
from tests.factories import applied, decided, deletion_requested, entries, live_nodes

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)


def static_doc(replicas: int = 3, **overrides: Any) -> dict[str, Any]:
    """The base NodePool made static (its cpu and memory limits traded for a node limit)."""
    return nodepool_doc(**{"spec.replicas": replicas, "spec.limits": {"nodes": "10"}, **overrides})


# --- the model, upstream's rules and the gate --------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "path", "message"),
    [
        ({"spec.limits": {"cpu": "10"}}, "spec", STATIC_LIMITS),
        ({"spec.limits": {"nodes": "4", "memory": "10Gi"}}, "spec", STATIC_LIMITS),
        ({"spec.weight": 10}, "spec", STATIC_WEIGHT),
        ({"spec.replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        ({"spec.replicas": 2**63}, "spec.replicas", "less than or equal to"),
        ({"spec.replicas": 1.5}, "spec.replicas", "integer"),
    ],
    ids=["cpu-limit", "nodes-and-memory", "weight", "negative", "past-int64", "fraction"],
)
def test_a_static_pool_breaking_a_rule_is_refused_at_its_field(overrides, path, message):
    result = validate_nodepool(static_doc(**overrides))
    assert not result.valid
    assert any(e.path == path and message in e.message for e in result.errors), [str(e) for e in result.errors]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"spec.limits": {"nodes": "4"}}, {"spec.limits": {}}, {"spec.replicas": 0}],
    ids=["bare", "node-limit", "empty-limits", "zero"],
)
def test_a_static_pool_within_the_rules_is_valid(overrides):
    result = validate_nodepool(static_doc(**overrides))
    assert result.valid, [str(e) for e in result.errors]
    assert result.nodepool is not None and result.nodepool.spec.static


def test_a_dynamic_pool_may_keep_its_weight_and_limits():
    result = validate_nodepool(nodepool_doc(**{"spec.weight": 10, "spec.limits": {"cpu": "10"}}))
    assert result.valid and result.nodepool is not None and not result.nodepool.spec.static


def test_the_gate_is_known_and_off_by_default():
    assert FEATURE_GATES[STATIC_CAPACITY] is False
    assert feature_gates("")[STATIC_CAPACITY] is False
    assert feature_gates("StaticCapacity=true")[STATIC_CAPACITY] is True


def test_a_static_pool_is_refused_while_the_gate_is_off_naming_the_field_and_the_gate():
    off = validate_nodepool(static_doc(), static_capacity=False)
    ((error,),) = [off.errors]
    assert error.path == "spec.replicas"
    assert "StaticCapacity" in error.message and "NODEWRIGHT_FEATURE_GATES" in error.message
    assert validate_nodepool(static_doc(), static_capacity=True).valid
    assert validate_nodepool(nodepool_doc(), static_capacity=False).valid  # a dynamic pool needs no gate


def test_validate_checks_the_gate_it_is_given():
    import yaml

    text = yaml.safe_dump(static_doc())
    (off,) = validate_api_text(text, static_capacity=False)
    (on,) = validate_api_text(text, static_capacity=True)
    assert not off.valid and on.valid


@pytest.mark.parametrize(
    ("old", "new", "refused"),
    [
        (static_doc(3), static_doc(5), False),
        (static_doc(3), static_doc(0), False),
        (nodepool_doc(), nodepool_doc(**{"spec.weight": 3}), False),
        (static_doc(3), nodepool_doc(), True),
        (nodepool_doc(), static_doc(3), True),
    ],
    ids=["scaled-up", "scaled-to-zero", "dynamic-stays", "static-to-dynamic", "dynamic-to-static"],
)
def test_a_pool_stays_static_or_dynamic_for_its_life(old, new, refused):
    errors = transition_errors(old, new)
    assert [(e.path, e.message) for e in errors] == ([("spec", STATIC_TRANSITION)] if refused else [])
    assert transition_errors(None, new) == []  # a create is no transition


# --- provisioning up to replicas ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "claims", "deleting", "expected"),
    [
        ({"s": 3}, [], [], [StaticNeed("s", 3, 0, 0)]),
        ({"s": 3}, [("a", "s"), ("b", "s")], [], [StaticNeed("s", 3, 2, 2)]),
        ({"s": 2}, [("a", "s"), ("b", "s"), ("c", "s")], [], [StaticNeed("s", 2, 3, 3)]),
        ({"s": 2}, [("a", "s"), ("b", "s")], ["a"], [StaticNeed("s", 2, 1, 2)]),  # being deleted: replaced
        ({"s": 1}, [("a", "other"), ("b", "other")], [], [StaticNeed("s", 1, 0, 0)]),  # another pool's
    ],
    ids=["empty", "short", "over", "deleting", "other-pool"],
)
def test_a_static_pool_counts_its_claims_not_being_deleted(replicas, claims, deleting, expected):
    assert static_needs(replicas, claims, deleting) == expected


@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))
def test_what_a_pool_lacks_brings_it_exactly_to_its_replicas(replicas, live, deleting):
    claims = [(f"c{i}", "s") for i in range(live + deleting)]
    (need,) = static_needs({"s": replicas}, claims, [f"c{i}" for i in range(deleting)])
    assert need.current == live and need.total == live + deleting
    assert need.current + need.count == max(replicas, live)


def option(name: str, cpu: int, price: float) -> InstanceOption:
    capacity = {"cpu": Decimal(cpu), "memory": Decimal(cpu * 4 * 2**30), "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": name}
    return InstanceOption(name, capacity, capacity, labels, (Offer("a", "on-demand", price),))


def test_a_static_claim_has_no_pods_and_every_type_the_template_allows_cheapest_first():
    catalog = [option("big", 8, 4.0), option("small", 2, 1.0), option("mid", 4, 2.0)]
    template = PoolTemplate("s", Requirements())
    options = pool_options(Requirements(), (), catalog)
    claim = static_claim(template, options, catalog)
    assert claim is not None
    assert claim.pods == [] and claim.nodepool == "s"
    assert claim.instance_types == ["small", "mid", "big"]
    assert claim.requirements.get("karpenter.sh/nodepool") is not None


def test_no_static_claim_when_no_type_can_launch():
    assert static_claim(PoolTemplate("s", Requirements()), [], []) is None


# --- deprovisioning down to replicas --------------------------------------------------------------


def facts(name: str, *, launched: bool = True, pods: int = 0, deleting: bool = False) -> ClaimFacts:
    return ClaimFacts(
        name,
        launched,
        NOW - timedelta(days=1),
        timedelta(days=30),
        tuple(PodFacts(f"{name}-{i}") for i in range(pods)),
        deleting,
    )


def test_a_scale_down_takes_upstreams_order_unlaunched_then_empty_then_cheapest():
    claims = [
        facts("busy", pods=3),
        facts("light", pods=1),
        facts("empty"),
        facts("pending", launched=False),
        facts("going", deleting=True),
    ]
    command = scale_down(claims, 1, NOW)
    assert command is not None and command.reason == REASON == "Overprovisioned"
    assert command.candidates == ("pending", "empty", "light")
    assert scale_down(claims, 4, NOW) is None  # the claim being deleted is not counted
    assert scale_down(claims, None, NOW) is None  # a dynamic pool


def test_a_scale_down_is_forceful_as_upstream_classes_it():
    assert REASON in FORCEFUL_REASONS


@given(st.integers(0, 12), st.integers(0, 12))
def test_a_scale_down_leaves_exactly_the_replicas(count, replicas):
    claims = [facts(f"c{i:02}", pods=i % 3) for i in range(count)]
    command = scale_down(claims, replicas, NOW)
    removed = len(command.candidates) if command else 0
    assert count - removed == min(count, replicas)


# --- the audit's re-check -----------------------------------------------------------------------


def static_applied(name: str, replicas: int, limits: dict[str, str] | None = None) -> Any:
    event = applied(name, limits, budgets=[{"nodes": "0"}])
    event.nodepool_object["spec"]["replicas"] = replicas
    return event


FIVE = [static_applied("p", 5), *live_nodes("p", 5)]
SCALED = [*FIVE, static_applied("p", 2)]


def rules(events: list[Any]) -> list[tuple[str, str]]:
    return [(v.rule, v.detail) for v in replay(entries(events, step=timedelta(minutes=10))).violations]


@pytest.mark.parametrize(
    ("events", "violated"),
    [
        ([*SCALED, decided("d", "p", REASON, ["p-n0", "p-n1", "p-n2"])], False),
        ([*SCALED, decided("d", "p", REASON, ["p-n0"])], False),
        ([*SCALED, decided("d", "p", REASON, ["p-n0", "p-n1", "p-n2", "p-n3"])], True),
        ([*FIVE, decided("d", "p", REASON, ["p-n0"])], True),
        ([*SCALED, deletion_requested("p-n4", "p"), decided("d", "p", REASON, ["p-n0", "p-n1", "p-n2"])], True),
    ],
    ids=["the-surplus", "part-of-it", "past-it", "at-replicas", "one-already-going"],
)
def test_a_scale_down_is_rechecked_against_the_replicas(events, violated):
    found = rules(events)
    assert bool(found) == violated, found
    if violated:
        assert all(
            rule == "over-limit" and "for Overprovisioned" in detail and "replicas" in detail for rule, detail in found
        )


def test_validate_reads_the_gate_from_the_environment(tmp_path, monkeypatch):
    import yaml

    from cli.validate import check_files
    from shared.runtime.inputs import InputError

    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(static_doc()))
    monkeypatch.delenv("NODEWRIGHT_FEATURE_GATES", raising=False)
    (off,) = check_files([path])
    assert [str(e) for r in off.results for e in r.errors] == [
        "spec.replicas: Forbidden: static NodePools require the StaticCapacity feature gate "
        "(NODEWRIGHT_FEATURE_GATES=StaticCapacity=true)"
    ]
    monkeypatch.setenv("NODEWRIGHT_FEATURE_GATES", "StaticCapacity=true")
    (on,) = check_files([path])
    assert all(r.valid for r in on.results)
    monkeypatch.setenv("NODEWRIGHT_FEATURE_GATES", "StaticCapacity=maybe")
    with pytest.raises(InputError, match="NODEWRIGHT_FEATURE_GATES"):
        check_files([path])
