"""Emptiness (upstream's `pkg/controllers/disruption/emptiness.go`): every empty, Consolidatable candidate its pool's budget allows, in
one delete command; budget blocks and disabled consolidation said, never silently dropped."""

from __future__ import annotations

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import Candidate, CandidatePod, NodeState
from shared.disruption.command import Decision
from shared.disruption.emptiness import emptiness


def claim(name: str, pool: str = "a", *pods: CandidatePod) -> Candidate:
    return Candidate(NodeState(name, pool, node=name, initialized=True, pods=pods))


WEB = CandidatePod("default", "web")
AGENT = CandidatePod("default", "agent", owner_kind="DaemonSet")


def run(candidates, remaining, disabled=(), waiting=()):
    return emptiness(
        candidates,
        remaining=remaining,
        disabled=lambda pool: pool in disabled,
        consolidatable=lambda c: c.nodeclaim not in waiting,
    )


def test_ten_empty_nodes_and_a_budget_of_three_take_three_and_say_the_rest_is_blocked():
    result = run([claim(f"n{i}") for i in range(10)], {"a": 3})
    assert result.command is not None and result.command.candidates == ("n0", "n1", "n2")
    assert result.command.reason is DisruptionReason.EMPTY and result.command.decision is Decision.DELETE
    assert result.budget_blocked == ("a",)
    assert result.budget_message() == "No allowed disruptions for disruption reason Empty due to blocking budget"


def test_one_command_across_pools_each_within_its_own_budget():
    result = run([claim("a1"), claim("b1", "b"), claim("a2"), claim("b2", "b")], {"a": 1, "b": None})
    assert result.command is not None and result.command.candidates == ("a1", "b1", "b2")
    assert result.budget_blocked == ("a",)


def test_a_zero_budget_decides_nothing_and_says_so():
    result = run([claim("n0")], {"a": 0})
    assert result.command is None and result.budget_blocked == ("a",)
    assert run([claim("n0")], {}).budget_blocked == ("a",)  # a pool without a budget entry has none


def test_only_empty_consolidatable_nodes_of_pools_with_consolidation_on():
    candidates = [
        claim("busy", "a", WEB),
        claim("daemons", "a", AGENT),  # DaemonSet pods leave a node empty
        claim("young"),
        claim("off", "never"),
    ]
    result = run(candidates, {"a": None, "never": None}, disabled={"never"}, waiting={"young"})
    assert result.command is not None and result.command.candidates == ("daemons",)
    assert result.unconsolidatable == {"off": 'NodePool "never" has consolidation disabled'}
    assert result.budget_blocked == ()


def test_nothing_empty_means_no_command_and_no_block():
    result = run([claim("busy", "a", WEB)], {"a": 0})
    assert result.command is None and result.budget_blocked == ()
