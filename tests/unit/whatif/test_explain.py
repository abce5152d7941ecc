"""`explain` on a day the offline runner recorded (`tests.explain_day`): for each NodePool's
claim the answer names the cause the disruption core gives, and a disrupted claim is told with
its decision and the budget snapshot the store checked."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from services.whatif.explain import ExplainError, explain
from services.whatif.instant import instant, recorded_catalog
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from shared.explain import model as m
from shared.explain.answer import answer
from tests.explain_day import day

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def log():
    return Runner(parse_scenario(day()), seed=1).play().log


def claim_of(log, pool: str, which: int = 0) -> str:
    return [e.data["nodeclaim"] for e in log if e.type == "NodeClaimCreated" and e.data["nodepool"] == pool][which]


def method(answer: m.Explanation, name: str) -> m.Verdict:
    return next(v for v in answer.methods if v.method == name)


def test_a_do_not_disrupt_pod_holds_its_node(log):
    answer = explain(log, claim_of(log, "held"))
    assert not answer.disrupted
    assert answer.causes == ["DoNotDisrupt"]
    assert 'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/held-' in answer.verdict
    assert method(answer, "Consolidation").cause == "DoNotDisrupt"


def test_a_pdb_that_allows_no_eviction_holds_its_node(log):
    answer = explain(log, claim_of(log, "guarded"))
    assert answer.causes == ["PodDisruptionBudget"]
    assert "Pdb prevents pod evictions (PodDisruptionBudget=[default/guarded" in method(answer, "Consolidation").message


def test_a_budget_at_zero_is_told_with_its_window_and_time_zone(log):
    answer = explain(log, claim_of(log, "frozen"))
    assert not answer.disrupted
    assert answer.causes == ["Budget"]
    empty = method(answer, "Emptiness")
    assert empty.applies and empty.cause == "Budget"
    budget = answer.budgets["Empty"]
    assert (budget.allowed, budget.remaining) == (0, 0)
    (window,) = budget.windows
    assert (window.schedule, window.duration, window.time_zone) == ("0 3 * * *", "2h", "America/Chicago")
    assert window.start_local == "2026-11-23T03:00:00-06:00" and window.end_local == "2026-11-23T05:00:00-06:00"
    assert "schedule '0 3 * * *' for 2h in America/Chicago" in empty.message


def test_a_node_too_young_says_when_it_becomes_consolidatable(log):
    answer = explain(log, claim_of(log, "slow"))
    assert answer.causes == ["NotConsolidatable"]
    verdict = method(answer, "Consolidation")
    at = verdict.details["consolidatable_at"]
    assert at == datetime.fromisoformat("2026-11-23T09:10:00+00:00") + timedelta(hours=1), "the pod deleted at 10m"
    assert "consolidateAfter 1h after its last pod event at 2026-11-23T09:10:00+00:00" in verdict.message


def test_no_cheaper_replacement_names_the_cheapest_against_the_price_now(log):
    answer = explain(log, claim_of(log, "tight"))
    assert answer.causes == ["NotCheaper"]
    details = method(answer, "Consolidation").details
    assert details["cheapest"]["price"] >= details["current_price"] == answer.price
    assert "Can't replace with a cheaper node: the cheapest that holds its pods is" in answer.verdict


def test_a_node_limit_that_leaves_no_room_for_a_replacement(log):
    answer = explain(log, claim_of(log, "capped", 1))
    assert answer.causes == ["NodeHardLimit"]
    verdict = method(answer, "Consolidation")
    assert verdict.message == (
        "No allowed disruptions for disruption reason Underutilized due to node hard limit: "
        "2 node(s), limits.nodes 2 leaves no room for a replacement"
    )
    assert verdict.details["cheapest"]["price"] < verdict.details["current_price"], "a cheaper node was found"


def test_a_consolidated_claim_is_told_with_its_decision_and_budget_snapshot(log):
    name = next(
        e.data["candidates"][0]
        for e in log
        if e.type == "DisruptionDecided" and e.data["reason"] == "Underutilized" and e.data["nodepool"] == "web"
    )
    answer = explain(log, name)
    assert answer.disrupted and answer.causes == []
    decision = answer.decision
    assert decision is not None and decision.reason == "Underutilized" and answer.at == decision.at
    assert decision.budget_check["allowed"] == 10 and "budgets active: [0]" in answer.verdict
    assert answer.position == decision.observed_position, "the world that decision's pass saw"
    assert method(answer, "Consolidation").disrupts
    assert any(c.candidates == decision.candidates for c in answer.passed), "the same pure pass decides it again"


def test_an_emptied_claim_before_its_decision_was_not_disrupted(log):
    decided = next(e for e in log if e.type == "DisruptionDecided" and e.data["reason"] == "Empty")
    name = decided.data["candidates"][0]
    assert explain(log, name).decision.reason == "Empty"
    earlier = explain(log, name, at=decided.occurred_at - timedelta(minutes=5))
    assert not earlier.disrupted and earlier.causes and earlier.verdict.startswith("not disrupted at")
    assert all(s["position"] < decided.position for s in earlier.story)


def test_a_node_is_explained_as_the_claim_it_was_registered_for(log):
    name = claim_of(log, "held")
    node = next(e.data["node"] for e in log if e.type == "NodeClaimRegistered" and e.data["nodeclaim"] == name)
    assert explain(log, node=node).nodeclaim == name


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"nodeclaim": "nope-123"}, "nodeclaim 'nope-123': the log never created a NodeClaim of that name"),
        ({"node": "nope-123"}, "node 'nope-123': no NodeClaim of the log registered a node of that name"),
        (
            {"nodeclaim": "HELD", "at": datetime.fromisoformat("2026-11-24T00:00:00+00:00")},
            "--at 2026-11-24T00:00:00+00:00: outside the log",
        ),
        (
            {"nodeclaim": "HELD", "at": datetime.fromisoformat("2026-11-22T00:00:00+00:00")},
            "outside the log, which runs from",
        ),
    ],
)
def test_bad_input_names_what_is_wrong(log, kwargs, says):
    if kwargs.get("nodeclaim") == "HELD":
        kwargs = {**kwargs, "nodeclaim": claim_of(log, "held")}
    with pytest.raises(ExplainError, match=None) as raised:
        explain(log, **kwargs)
    assert says in str(raised.value)


def test_an_instant_before_the_claim_was_created_is_refused(log):
    name = claim_of(log, "web", -1)
    with pytest.raises(ExplainError, match=f"nodeclaim {name} was created later"):
        explain(log, name, at=log[0].occurred_at)


def test_a_claim_a_method_would_take_waits_for_the_passs_first_command(log):
    """On the world the Empty decision's pass saw, single-node consolidation alone would take web's
    other node (its one pod fits on the empty node, then still there), but the pass takes the
    empty node first: one graceful command per pass."""
    empty = next(e for e in log if e.type == "DisruptionDecided" and e.data["reason"] == "Empty")
    later = next(e for e in log if e.type == "DisruptionDecided" and e.data["reason"] == "Underutilized")
    folded = instant(log, empty.occurred_at, recorded_catalog(log), through=empty.data["observed_position"])
    name = later.data["candidates"][0]
    row = folded.counters["web"]
    said = answer(folded.world(), name, folded.projection.pools["web"], len(row.disrupting))
    assert said is not None and not said.taken
    assert said.causes == ["AnotherCommandFirst"]
    assert [c.candidates for c in said.passed] == [empty.data["candidates"]]
    assert said.verdict.startswith("Consolidation alone would take it (deleted: its pods fit on the other nodes")


def test_a_claim_waits_while_another_command_awaits_its_recheck(log):
    """Right after the Empty decision, before its re-check, consolidation alone would replace
    web's other node, but the pass asks no graceful method while a command awaits its re-check."""
    empty = next(e for e in log if e.type == "DisruptionDecided" and e.data["reason"] == "Empty")
    later = next(e for e in log if e.type == "DisruptionDecided" and e.data["reason"] == "Underutilized")
    answer_ = explain(log, later.data["candidates"][0], at=empty.occurred_at)
    assert not answer_.disrupted and answer_.causes == ["CommandAwaitsRecheck"]
    assert method(answer_, "Consolidation").disrupts
    assert "a graceful command awaits its re-check" in answer_.verdict
