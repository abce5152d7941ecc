"""A replacement in another pool than its candidates': the store's rules reserve it in its target
pool as a launch (resources and `limits.nodes`, in either mode); budgets and the node hard limit
of the decision count only what stays in the candidates' pool; the audit re-checks the target's
limits and that the decision planned it (`shared.policy.replacements`), in one fold or a split one."""

from __future__ import annotations

import pytest

from shared.config import feature_gates
from shared.events import contracts as c
from shared.policy.audit import replay
from shared.policy.replacements import CrossPool
from tests.factories import applied, created, decided, entries, live_nodes
from tests.unit.test_split_replay import split_fold


def cross(decision: str, pool: str, candidates: list[str], targets: dict[str, str]) -> c.DisruptionDecided:
    return decided(decision, pool, "Drifted", candidates, list(targets)).model_copy(
        update={"replacement_nodepools": targets}
    )


def replacement(name: str, pool: str, decision: str, source: str | None) -> c.NodeClaimCreated:
    return created(name, pool, replacement_for=decision).model_copy(update={"replacement_from": source})


def rules(events):
    return [(v.type, v.rule) for v in replay(entries(events)).violations]


BASE = [applied("lo", budgets=[{"nodes": "100%"}]), *live_nodes("lo", 2)]


@pytest.mark.parametrize(
    ("hi", "expected"),
    [
        (applied("hi"), []),  # no limits: it goes there
        (applied("hi", {"nodes": "2"}), []),  # room for one more
        (applied("hi", {"nodes": "1"}), [("NodeClaimCreated", "limits")]),  # limits.nodes, Hard
        (applied("hi", {"nodes": "1"}, mode="Soft"), [("NodeClaimCreated", "limits")]),  # Soft too: no candidate goes
        (applied("hi", {"cpu": "3"}), [("NodeClaimCreated", "limits")]),  # 2 + 2 cpu > 3
    ],
)
def test_the_target_pools_limits_hold_a_replacement(hi, expected):
    events = [
        *BASE,
        hi,
        *live_nodes("hi", 1),
        cross("d", "lo", ["lo-n0"], {"r0": "hi"}),
        replacement("r0", "hi", "d", "lo"),
    ]
    assert rules(events) == expected


def test_the_candidates_pool_counts_only_the_replacements_it_gets():
    # lo at its Hard limit: a replacement of its own would pass it, one in hi does not touch it
    events = [applied("lo", {"nodes": "2"}, budgets=[{"nodes": "100%"}]), *live_nodes("lo", 2), applied("hi")]
    assert rules([*events, cross("d", "lo", ["lo-n0"], {"r0": "hi"}), replacement("r0", "hi", "d", "lo")]) == []
    assert rules([*events, decided("d", "lo", "Drifted", ["lo-n0"], ["r0"])]) == [
        ("DisruptionDecided", "node-hard-limit")
    ]
    out = replay(entries([*events, cross("d", "lo", ["lo-n0"], {"r0": "hi"})]))
    assert out.pools["lo"].replacing == {}  # the plan is not the candidates' pool's to hold


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ([replacement("r0", "hi", "nope", "lo")], "no such decision did"),
        ([replacement("rX", "hi", "d", "lo")], "planned no replacement of that name"),
        ([replacement("r0", "hi", "d", "other")], "no such decision did"),  # names the wrong pool as its source
        (
            [c.DisruptionCancelled(decision_id="d", nodepool="lo", reason="Drifted", candidates=["lo-n0"])],
            "had ended before it was created",
        ),
    ],
)
def test_the_audit_names_a_forged_cross_pool_replacement(tail, why):
    events = [*BASE, applied("hi"), cross("d", "lo", ["lo-n0"], {"r0": "hi"}), *tail]
    if isinstance(tail[0], c.DisruptionCancelled):
        events.append(replacement("r0", "hi", "d", "lo"))
    whole = replay(entries(events))
    assert [v.rule for v in whole.violations] == ["lifecycle"] and why in whole.violations[0].detail
    joined = split_fold(entries(events), 2)  # the decision and the claim in different parts
    assert joined is not None and [v.detail for v in joined.violations] == [v.detail for v in whole.violations]


def test_a_planned_cross_pool_replacement_is_clean_in_a_split_fold():
    events = [*BASE, applied("hi"), cross("d", "lo", ["lo-n0"], {"r0": "hi"}), replacement("r0", "hi", "d", "lo")]
    joined = split_fold(entries(events), 2)
    assert joined is not None and joined.violations == [] and CrossPool().settle() == []


def test_a_decision_may_not_name_a_pool_for_a_claim_it_does_not_replace():
    with pytest.raises(ValueError, match="replacement_nodepools: 'x' is not one of the replacements"):
        c.DisruptionDecided(
            decision_id="d", nodepool="lo", reason="Drifted", candidates=["a"], replacement_nodepools={"x": "hi"}
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", False),
        ("SpotToSpotConsolidation=true", True),
        (" SpotToSpotConsolidation = TRUE ,", True),
        ("SpotToSpotConsolidation=false", False),
        ("SpotToSpotConsolidation", "must be Name=true or Name=false"),
        ("SpotToSpotConsolidation=yes", "must be Name=true or Name=false"),
        ("NodeOverlay=true", False),
        ("Unheard=true", "unknown feature gate 'Unheard'"),
    ],
)
def test_feature_gates_take_upstreams_syntax(text, expected):
    if isinstance(expected, bool):
        assert feature_gates(text)["SpotToSpotConsolidation"] is expected
    else:
        with pytest.raises(ValueError, match=f"NODEWRIGHT_FEATURE_GATES: .*{expected}"):
            feature_gates(text)
