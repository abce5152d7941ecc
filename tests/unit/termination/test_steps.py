"""Termination's rules (upstream's `pkg/controllers/node/termination/`; docs/termination.md), table by table: drainable pods, tiers, do-not-disrupt, the
termination grace period, the minimum drain time, and the order of the steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.api.core import Toleration
from shared.termination.pods import DrainPod, do_not_disrupt, drainable, forced_at, granted_seconds, tier
from shared.termination.steps import (
    MIN_DRAIN,
    DeleteInstance,
    DeleteNode,
    Drain,
    Finish,
    Taint,
    Termination,
    drain,
    forced_message,
    next_step,
)

T0 = datetime(2026, 11, 24, 12, tzinfo=UTC)


def pod(name: str, **fields) -> DrainPod:
    return DrainPod(f"default/{name}", **fields)


def claim(**fields) -> Termination:
    base = {"nodeclaim": "c1", "nodepool": "p", "requested_at": T0, "node": "c1", "draining_since": T0}
    return Termination(**{**base, **fields})


@pytest.mark.parametrize(
    ("pod_", "expected"),
    [
        (pod("web"), True),
        (pod("done", terminal=True), False),
        (pod("mirror", owner_kind="Node"), False),
        (pod("tolerates", tolerations=(Toleration(key="karpenter.sh/disrupted", operator="Exists"),)), False),
        (pod("tolerates-all", tolerations=(Toleration(operator="Exists"),)), False),
        (pod("tolerates-other", tolerations=(Toleration(key="other", operator="Exists"),)), True),
        (pod("deleting", deleting_since=T0 - timedelta(seconds=30)), True),
        (pod("stuck", deleting_since=T0 - timedelta(minutes=2)), False),
    ],
)
def test_which_pods_a_drain_evicts(pod_: DrainPod, expected: bool):
    assert drainable(pod_, T0) is expected


@pytest.mark.parametrize(
    ("pod_", "expected"),
    [
        (pod("web"), 0),
        (pod("agent", owner_kind="DaemonSet"), 1),
        (pod("dns", priority_class="system-cluster-critical"), 2),
        (pod("proxy", owner_kind="DaemonSet", priority_class="system-node-critical"), 3),
        (pod("high", priority_class="high-priority"), 0),
    ],
)
def test_tiers(pod_: DrainPod, expected: int):
    assert tier(pod_) == expected


@pytest.mark.parametrize(
    ("value", "started", "expected"),
    [
        ("true", None, True),
        ("false", None, False),
        ("10m", T0 - timedelta(minutes=5), True),
        ("10m", T0 - timedelta(minutes=15), False),
        ("10m", None, True),
        ("nonsense", None, False),
    ],
)
def test_do_not_disrupt(value: str, started: datetime | None, expected: bool):
    guarded = pod("db", annotations={"karpenter.sh/do-not-disrupt": value}, started_at=started)
    assert do_not_disrupt(guarded, T0) is expected


def test_only_the_first_non_empty_tier_is_evicted_each_pass():
    pods = [
        pod("agent", owner_kind="DaemonSet"),
        pod("web-1"),
        pod("dns", priority_class="system-cluster-critical"),
        pod("web-2"),
    ]
    plan = drain(claim(), pods, T0)
    assert plan.tier == 0 and [p.key for p in plan.evict] == ["default/web-1", "default/web-2"]
    assert plan.remaining == 4
    plan = drain(claim(), pods[0:1] + pods[2:3], T0)
    assert plan.tier == 1 and [p.key for p in plan.evict] == ["default/agent"]
    plan = drain(claim(), pods[2:3], T0)
    assert plan.tier == 2 and [p.key for p in plan.evict] == ["default/dns"]


def test_a_do_not_disrupt_pod_waits_and_holds_its_tier():
    guarded = pod("db", annotations={"karpenter.sh/do-not-disrupt": "true"})
    plan = drain(claim(), [guarded, pod("agent", owner_kind="DaemonSet")], T0)
    assert plan.evict == () and plan.waiting == (guarded,) and plan.tier == 0 and plan.idle


def test_the_grace_period_forces_each_pod_at_its_own_time_whatever_its_tier_or_budget():
    t = claim(grace_period=timedelta(minutes=10))  # terminates at T0 + 10 min
    slow = pod("slow", grace_seconds=120, annotations={"karpenter.sh/do-not-disrupt": "true"})
    fast = pod("fast", grace_seconds=30, owner_kind="DaemonSet")
    assert forced_at(slow, t.termination_time) == T0 + timedelta(minutes=8)
    at = T0 + timedelta(minutes=8, seconds=1)
    plan = drain(t, [slow, fast], at)
    assert plan.force == ((slow, 119),) and plan.evict == (fast,)  # the rest: the next tier that has pods
    later = T0 + timedelta(minutes=9, seconds=31)
    assert [p.key for p, _ in drain(t, [slow, fast], later).force] == ["default/slow", "default/fast"]
    assert granted_seconds(t.termination_time, T0 + timedelta(minutes=11)) == 1
    message = forced_message(t.termination_time, 119, slow)
    assert message.startswith("Deleting the pod to accommodate the terminationTime 2026-11-24T12:10:00+00:00")
    assert "granted 119 seconds of grace-period of its 120 terminationGracePeriodSeconds" in message


def test_without_a_grace_period_nothing_is_ever_forced():
    guarded = pod("db", annotations={"karpenter.sh/do-not-disrupt": "true"})
    plan = drain(claim(), [guarded], T0 + timedelta(days=30))
    assert plan.force == () and plan.waiting == (guarded,)


def test_the_steps_in_order():
    fresh = claim(draining_since=None)
    assert isinstance(next_step(fresh, [pod("web")], T0), Taint)
    draining = claim()
    assert isinstance(next_step(draining, [pod("web")], T0 + timedelta(minutes=1)), Drain)
    emptied = next_step(draining, [], T0 + MIN_DRAIN - timedelta(seconds=1))
    assert isinstance(emptied, Drain) and emptied.idle  # the minimum drain time is kept
    assert isinstance(next_step(draining, [], T0 + MIN_DRAIN), DeleteInstance)
    assert isinstance(next_step(claim(instance_gone=True), [], T0 + MIN_DRAIN), DeleteNode)
    assert isinstance(next_step(claim(instance_gone=True, node_gone=True), [], T0), Finish)


def test_a_claim_without_a_node_or_whose_instance_went_is_not_drained():
    unregistered = claim(node=None, draining_since=None)
    assert isinstance(next_step(unregistered, [], T0), DeleteInstance)
    assert isinstance(next_step(claim(node=None, instance_gone=True), [], T0), Finish)
    reclaimed = claim(draining_since=None, instance_gone=True)
    assert isinstance(next_step(reclaimed, [pod("web")], T0), DeleteNode)


def test_the_eviction_reason_names_the_disruption_or_a_forceful_termination():
    assert claim(reason="Drifted").eviction_reason == "Drifted"
    assert claim(reason="Manual").eviction_reason == "Forceful Termination"
