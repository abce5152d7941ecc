"""Disruption candidates (upstream's `pkg/controllers/disruption/types.go` `NewCandidate`), table by table: which nodes may be considered, the
`DisruptionBlocked` message and cause of each that may not, PodDisruptionBudget arithmetic, and
when a node becomes Consolidatable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.api.pod import LabelSelector
from shared.disruption.candidates import (
    DO_NOT_DISRUPT,
    NODEPOOL,
    NOMINATED,
    PDB,
    Blocked,
    Candidate,
    CandidatePod,
    NodeState,
    candidate,
)
from shared.disruption.consolidatable import consolidatable, consolidatable_at, disabled_message
from shared.disruption.pdbs import Member, Pdb, disruptions_allowed, fully_blocking, scaled

T0 = datetime(2026, 11, 24, 12, tzinfo=UTC)
WEB = {"app": "web"}


def pod(name: str, **fields) -> CandidatePod:
    return CandidatePod("default", name, labels=fields.pop("labels", WEB), **fields)


def node(*pods: CandidatePod, **fields) -> NodeState:
    return NodeState("c1", fields.pop("nodepool", "a"), node="c1", initialized=True, pods=pods, **fields)


def pdb(name: str = "web", **fields) -> Pdb:
    return Pdb("default", name, LabelSelector(match_labels=fields.pop("labels", WEB)), **fields)


def judge(state: NodeState, *, pdbs=(), allowed=None, now=T0, eventual=False):
    return candidate(state, pools={"a"}, pdbs=list(pdbs), allowed=allowed or {}, now=now, eventual=eventual)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (node(pod("w")), Candidate),
        (node(), Candidate),  # an empty node
        (NodeState("c1", "a", node="c1", initialized=False), None),  # not initialized: not judged
        (node(pod("w"), deleting=True), None),  # already going
    ],
)
def test_nodes_that_are_candidates_and_nodes_left_out_silently(state, expected):
    result = judge(state)
    assert result is None if expected is None else isinstance(result, expected)


@pytest.mark.parametrize(
    ("state", "pdbs", "allowed", "cause", "message"),
    [
        (node(pod("w"), nominated=True), (), {}, NOMINATED, "Node is nominated for a pending pod"),
        (
            node(pod("w"), do_not_disrupt="true"),
            (),
            {},
            DO_NOT_DISRUPT,
            'Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation',
        ),
        (node(pod("w"), nodepool="gone"), (), {}, NODEPOOL, "NodePool not found (NodePool=gone)"),
        (
            node(pod("w", do_not_disrupt="true")),
            (),
            {},
            DO_NOT_DISRUPT,
            'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/w)',
        ),
        (  # DaemonSet and mirror pods hold their node with the annotation too
            node(pod("agent", owner_kind="DaemonSet", do_not_disrupt="true")),
            (),
            {},
            DO_NOT_DISRUPT,
            'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/agent)',
        ),
        (
            node(pod("static", owner_kind="Node", do_not_disrupt="true")),
            (),
            {},
            DO_NOT_DISRUPT,
            'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/static)',
        ),
        (
            node(pod("w")),
            (pdb(),),
            {"default/web": 0},
            PDB,
            "Pdb prevents pod evictions (PodDisruptionBudget=[default/web])",
        ),
        (
            node(pod("w")),
            (pdb("b"), pdb("a")),
            {"default/a": 1, "default/b": 1},
            PDB,
            "Eviction does not support multiple PDBs (PodDisruptionBudget(s)=[default/a default/b])",
        ),
        (  # a DaemonSet pod is evicted, so its budget is checked
            node(pod("agent", owner_kind="DaemonSet")),
            (pdb(),),
            {"default/web": 0},
            PDB,
            "Pdb prevents pod evictions (PodDisruptionBudget=[default/web])",
        ),
    ],
)
def test_each_block_says_why_in_upstreams_words(state, pdbs, allowed, cause, message):
    assert judge(state, pdbs=pdbs, allowed=allowed) == Blocked("c1", "c1", cause, message)


@pytest.mark.parametrize(
    ("state", "note"),
    [
        (node(pod("w", do_not_disrupt="false")), "only 'true' or a duration counts"),
        (node(pod("w", do_not_disrupt="banana")), "an invalid value is ignored"),
        (node(pod("w", do_not_disrupt="true", terminal=True)), "a finished pod holds nothing"),
        (node(pod("w", do_not_disrupt="true", terminating=True)), "a terminating pod holds nothing"),
        (
            node(pod("w", do_not_disrupt="1h", started_at=T0 - timedelta(hours=2))),
            "a duration counts from the pod's start, and is over",
        ),
    ],
)
def test_do_not_disrupt_that_does_not_hold(state, note):
    assert isinstance(judge(state), Candidate), note


def test_a_do_not_disrupt_duration_holds_until_it_is_over_and_always_before_the_pod_starts():
    running = node(pod("w", do_not_disrupt="1h", started_at=T0))
    assert isinstance(judge(running, now=T0 + timedelta(minutes=59)), Blocked)
    assert isinstance(judge(running, now=T0 + timedelta(hours=1)), Candidate)
    assert isinstance(judge(node(pod("w", do_not_disrupt="1h"))), Blocked)


@pytest.mark.parametrize(
    ("blocked_pod", "note"),
    [
        (pod("w", terminal=True), "terminal pods are not evicted"),
        (pod("w", terminating=True), "terminating pods are not evicted"),
        (pod("w", owner_kind="Node"), "mirror pods are not evicted"),
        (pod("w", tolerates_disrupted=True), "a pod tolerating the disrupted taint stays"),
    ],
)
def test_budgets_are_checked_only_for_pods_a_drain_would_evict(blocked_pod, note):
    assert isinstance(judge(node(blocked_pod), pdbs=[pdb()], allowed={"default/web": 0}), Candidate), note


def test_an_unready_pod_under_an_always_allow_budget_may_go():
    budget = pdb(unhealthy_always_allow=True)
    assert isinstance(judge(node(pod("w", ready=False)), pdbs=[budget], allowed={"default/web": 0}), Candidate)
    assert isinstance(judge(node(pod("w")), pdbs=[budget], allowed={"default/web": 0}), Blocked)


def test_a_budget_in_another_namespace_or_for_other_pods_does_not_block():
    other = Pdb("other", "web", LabelSelector(match_labels=WEB))
    db = pdb("db", labels={"app": "db"})
    assert isinstance(judge(node(pod("w")), pdbs=[other, db], allowed={}), Candidate)


def test_drift_disregards_pod_blocks_on_a_claim_with_a_grace_period_but_not_node_blocks():
    held = node(pod("w", do_not_disrupt="true"), grace_period=True)
    assert isinstance(judge(held, eventual=True), Candidate)
    assert isinstance(judge(held), Blocked)  # graceful methods still respect it
    pinned = node(pod("w"), grace_period=True, do_not_disrupt="true")
    assert isinstance(judge(pinned, eventual=True), Blocked)


def test_an_empty_node_holds_only_daemonset_mirror_or_finished_pods():
    state = node(pod("agent", owner_kind="DaemonSet"), pod("static", owner_kind="Node"), pod("job", terminal=True))
    result = judge(state)
    assert isinstance(result, Candidate) and result.empty
    busy = judge(node(pod("w"), pod("agent", owner_kind="DaemonSet")))
    assert isinstance(busy, Candidate) and [p.name for p in busy.reschedulable] == ["w"]


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "healthy", "expected", "allowed"),
    [
        (None, 0, 3, 3, 0),
        (None, 1, 3, 3, 1),
        (None, "50%", 4, 4, 2),
        (None, "34%", 3, 3, 2),  # 34% of 3 rounds up to 2
        (None, 1, 2, 3, 0),  # one already down
        (2, None, 3, 3, 1),
        ("100%", None, 3, 3, 0),
        ("50%", None, 3, 3, 1),  # 50% of 3 rounds up to 2 kept
        (None, None, 3, 3, 0),  # neither set: keep every pod
    ],
)
def test_disruptions_allowed(min_available, max_unavailable, healthy, expected, allowed):
    budget = pdb(min_available=min_available, max_unavailable=max_unavailable)
    members = [Member(healthy=i < healthy) for i in range(expected)]
    assert disruptions_allowed(budget, members) == allowed


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "blocking"),
    [(None, 0, True), (None, "0%", True), ("100%", None, True), (None, 1, False), (3, None, False)],
)
def test_fully_blocking_budgets(min_available, max_unavailable, blocking):
    assert fully_blocking(pdb(min_available=min_available, max_unavailable=max_unavailable)) is blocking


def test_scaled_rounds_percentages_up():
    assert [scaled("10%", 5), scaled("10%", 10), scaled(3, 100)] == [1, 1, 3]


@pytest.mark.parametrize(
    ("after", "last_event", "now", "expected"),
    [
        (timedelta(0), None, T0, True),
        (timedelta(minutes=5), None, T0 + timedelta(minutes=4, seconds=59), False),
        (timedelta(minutes=5), None, T0 + timedelta(minutes=5), True),  # from initialization
        (timedelta(minutes=5), T0 + timedelta(minutes=3), T0 + timedelta(minutes=7), False),  # from the pod event
        (timedelta(minutes=5), T0 + timedelta(minutes=3), T0 + timedelta(minutes=8), True),
        (None, None, T0 + timedelta(days=365), False),  # Never
    ],
)
def test_consolidatable_after_consolidate_after_since_the_last_pod_event(after, last_event, now, expected):
    assert consolidatable(after, T0, last_event, now) is expected


def test_consolidatable_at_says_when_and_never():
    assert consolidatable_at(timedelta(seconds=30), T0, None) == T0 + timedelta(seconds=30)
    assert consolidatable_at(None, T0, None) is None
    assert disabled_message("a") == 'NodePool "a" has consolidation disabled'
