"""Node repair (upstream's node health controller): a node unhealthy past its policy's toleration
is repaired forcefully, unless more than 20% of its pool's nodes are unhealthy; and the audit
re-checks every repair against the log."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.disruption.repair import AWS_REPAIR_POLICIES, Condition, Sick, repairs, unhealthy
from shared.policy.audit import replay
from shared.policy.unhealthy import unhealthy_threshold
from tests.factories import T0, applied, entries, live_nodes

NOW = T0 + timedelta(hours=1)


def sick(name: str, minutes: int, status: str = "Unknown", condition: str = "Ready", pool: str = "p") -> Sick:
    return Sick(name, pool, (Condition(condition, status, NOW - timedelta(minutes=minutes)),))


@pytest.mark.parametrize(("nodes", "allowed"), [(1, 1), (4, 1), (5, 1), (6, 2), (10, 2), (11, 3), (0, 0)])
def test_the_threshold_is_a_fifth_of_the_pool_rounded_up(nodes, allowed):
    assert unhealthy_threshold(nodes) == allowed


@pytest.mark.parametrize(
    ("unwell", "nodes", "repaired", "held"),
    [
        ([sick("a", 31)], 10, ["a"], []),  # past its 30 minutes: repaired
        ([sick("a", 29)], 10, [], []),  # still tolerated
        ([sick("a", 31, "False")], 10, ["a"], []),  # Ready False is tolerated as long as Unknown
        ([sick("a", 11, "False", "AcceleratedHardwareReady")], 10, ["a"], []),  # its policy: 10 minutes
        ([sick("a", 31, "True")], 10, [], []),  # no policy matches a healthy condition
        ([sick("a", 31), sick("b", 5)], 10, ["a"], []),  # two of ten unhealthy: within 20%
        ([sick("a", 31), sick("b", 31), sick("c", 5)], 10, [], ["a", "b"]),  # three of ten: held back
        ([sick("a", 31), sick("b", 31, pool="q"), sick("c", 1, pool="q")], 2, ["a"], ["b"]),  # each pool its own
    ],
)
def test_repairs_table(unwell, nodes, repaired, held):
    found = repairs(unwell, {"p": nodes, "q": 5}, AWS_REPAIR_POLICIES, NOW)
    assert [command.candidates[0] for command, _, _ in found.commands] == repaired
    assert [name for name, _ in found.blocked] == held
    assert all(command.reason == "Unhealthy" for command, _, _ in found.commands)


def test_no_policies_no_repair():
    assert repairs([sick("a", 300)], {"p": 10}, (), NOW).commands == ()


def test_the_policy_that_ends_first_is_the_evidence():
    conditions = (
        Condition("Ready", "False", NOW - timedelta(minutes=20)),  # due in 10 minutes
        Condition("AcceleratedHardwareReady", "False", NOW - timedelta(minutes=15)),  # due 5 minutes ago
    )
    evidence = unhealthy(conditions, AWS_REPAIR_POLICIES)
    assert evidence is not None and evidence.condition == "AcceleratedHardwareReady"
    assert evidence.due == NOW - timedelta(minutes=5)


def _not_ready(claim: str, since: str | None = None):
    from shared.events import contracts as c

    return c.NodeClaimNotReady(nodeclaim=claim, nodepool="p", node=f"{claim}-node", status="Unknown", since=since)


def _agent(claim: str, since: str, status: str = "False", condition: str = "KernelReady"):
    from shared.events import contracts as c

    return c.NodeClaimConditionChanged(
        nodeclaim=claim, nodepool="p", node=f"{claim}-node", condition=condition, status=status, since=since
    )


def _repair(claim: str, since: str, minutes: int = 30, decision: str = "r1", condition: str = "Ready"):
    from shared.events import contracts as c

    status = "Unknown" if condition == "Ready" else "False"
    evidence = c.Unhealthy(condition=condition, status=status, since=since, toleration_seconds=minutes * 60)
    return c.DisruptionDecided(
        decision_id=decision, nodepool="p", reason="Unhealthy", candidates=[claim], forceful=True, unhealthy=evidence
    )


def _violations(events) -> list[str]:
    return [v.rule + ": " + v.detail for v in replay(entries(events, step=timedelta(minutes=1))).violations]


def test_the_audit_holds_a_repair_to_its_evidence_and_the_threshold():
    pool = [applied("p"), *live_nodes("p", 10)]  # ten claims, a minute apart from T0
    since = (T0 + timedelta(minutes=31)).isoformat()
    ok = [*pool, _not_ready("p-n0", since), *[applied("p")] * 30, _repair("p-n0", since)]
    assert _violations(ok) == []
    early = [*pool, _not_ready("p-n0", since), _repair("p-n0", since)]
    assert any("is tolerated until" in v for v in _violations(early))
    healthy = [*pool, *[applied("p")] * 40, _repair("p-n0", since)]
    assert any("p-n0 was Ready" in v for v in _violations(healthy))
    stretched = [*pool, _not_ready("p-n0", since), *[applied("p")] * 40, _repair("p-n0", T0.isoformat())]
    assert any("NotReady only since" in v for v in _violations(stretched))
    crowded = [*pool, *(_not_ready(f"p-n{i}", since) for i in range(3)), *[applied("p")] * 40, _repair("p-n0", since)]
    assert any("3 of its 10 node(s) were unhealthy" in v for v in _violations(crowded))
    no_evidence = [*pool, _not_ready("p-n0", since), *[applied("p")] * 40, _repair("p-n0", since)]
    no_evidence[-1] = no_evidence[-1].model_copy(update={"unhealthy": None})
    assert any("records no evidence" in v for v in _violations(no_evidence))


def test_the_audit_holds_an_agent_conditions_repair_to_its_recorded_condition():
    """A node monitoring agent's condition (`KernelReady` False) leaves the node Ready: the audit
    holds the repair to the condition the log recorded, and counts it toward the threshold."""
    pool = [applied("p"), *live_nodes("p", 10)]
    since = (T0 + timedelta(minutes=31)).isoformat()
    kernel = {"condition": "KernelReady"}
    ok = [*pool, _agent("p-n0", since), *[applied("p")] * 30, _repair("p-n0", since, **kernel)]
    assert _violations(ok) == []
    unrecorded = [*pool, *[applied("p")] * 40, _repair("p-n0", since, **kernel)]
    assert any("p-n0 had no KernelReady other than True recorded" in v for v in _violations(unrecorded))
    cleared = [*pool, _agent("p-n0", since), _agent("p-n0", since, "True"), *[applied("p")] * 40]
    assert any("had no KernelReady" in v for v in _violations([*cleared, _repair("p-n0", since, **kernel)]))
    stretched = [*pool, _agent("p-n0", since), *[applied("p")] * 40, _repair("p-n0", T0.isoformat(), **kernel)]
    assert any("was KernelReady=False only since" in v for v in _violations(stretched))
    mixed = [*pool, _not_ready("p-n1", since), _agent("p-n2", since), _agent("p-n0", since)]
    crowded = [*mixed, *[applied("p")] * 40, _repair("p-n0", since, **kernel)]
    assert any("3 of its 10 node(s) were unhealthy" in v for v in _violations(crowded))
