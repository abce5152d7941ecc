"""The NodeClaim writers against a recording Cluster port: the scheduler's lifecycle writes
(object, status, node finalizer and labels), disruption's judgments, each written once, retried
after a failure on a later pass, and written again by a new leader."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from shared.events import contracts as c
from shared.kube.nodeclaims import Judgment, NodeClaimRecords
from shared.ports.cluster import ClusterError, NotFound
from shared.runtime.nodeclaims import REFRESH, NodeClaimWriter
from tests.factories import T0
from tests.unit.test_nodeclaim_objects import (
    CLAIM,
    CREATED,
    INITIALIZED,
    LAUNCHED,
    NODE,
    REGISTERED,
    fold,
    pool_applied,
)


class RecordingCluster:
    """The Cluster port's NodeClaim calls, recorded; `failing` names calls that time out (the
    API out of reach), `refusing` those the API refuses, `missing` those that find nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.failing: set[str] = set()
        self.refusing: set[str] = set()
        self.missing: set[str] = set()

    def _call(self, name: str, *args: Any) -> None:
        if name in self.failing:
            raise TimeoutError(name)
        if name in self.refusing:
            raise ClusterError(f"{name}: forbidden")
        if name in self.missing:
            raise NotFound(name)
        self.calls.append((name, *args))

    async def create_nodeclaim(self, nodeclaim: dict[str, Any]) -> None:
        self._call("create_nodeclaim", nodeclaim["metadata"]["name"])

    async def patch_nodeclaim_status(self, nodeclaim: str, status: dict[str, Any]) -> None:
        types = tuple(f"{x['type']}={x['status']}" for x in status["conditions"])
        self._call("patch_nodeclaim_status", nodeclaim, types)

    async def delete_nodeclaim(self, nodeclaim: str) -> None:
        self._call("delete_nodeclaim", nodeclaim)

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self._call("add_finalizer", kind, name, finalizer)

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self._call("remove_finalizer", kind, name, finalizer)

    async def label_node(self, node: str, labels: dict[str, str]) -> None:
        self._call("label_node", node, tuple(sorted(labels)))

    def take(self) -> list[tuple[Any, ...]]:
        calls, self.calls = self.calls, []
        return calls


def names(calls: list[tuple[Any, ...]]) -> list[str]:
    return [call[0] for call in calls]


def writer() -> tuple[NodeClaimWriter, RecordingCluster, NodeClaimRecords]:
    cluster = RecordingCluster()
    records = NodeClaimRecords()
    return NodeClaimWriter(cluster, records), cluster, records  # type: ignore[arg-type]


LIFECYCLE = [
    ([pool_applied(), CREATED], []),  # not launched: no object yet
    ([LAUNCHED], ["create_nodeclaim", "patch_nodeclaim_status"]),
    ([], []),  # nothing changed: nothing written
    (
        [REGISTERED],
        ["patch_nodeclaim_status", "add_finalizer", "label_node"],
    ),
    ([INITIALIZED], ["patch_nodeclaim_status", "label_node"]),
]


async def test_the_scheduler_writes_each_lifecycle_step_once():
    objects, cluster, records = writer()
    for events, expected in LIFECYCLE:
        fold(*events, records=records)
        await objects.keep_lifecycle()
        assert names(cluster.take()) == expected
    fold(REGISTERED, INITIALIZED, records=records)  # repeated facts change nothing
    await objects.keep_lifecycle()
    assert cluster.take() == []


async def test_the_node_gets_upstreams_finalizer_and_labels():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, REGISTERED, INITIALIZED, records=records)
    await objects.keep_lifecycle()
    calls = cluster.take()
    assert ("add_finalizer", "Node", NODE, "karpenter.sh/termination") in calls
    assert ("label_node", NODE, ("karpenter.sh/initialized", "karpenter.sh/registered")) in calls
    status = next(call for call in calls if call[0] == "patch_nodeclaim_status")
    assert status[2] == ("Launched=True", "Registered=True", "Initialized=True", "Ready=True")


@pytest.mark.parametrize("failure", ["failing", "refusing"])
async def test_a_write_that_fails_is_tried_again_on_a_later_pass(failure):
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)
    getattr(cluster, failure).add("patch_nodeclaim_status")
    assert await objects.keep_lifecycle() == 0  # no exception: the pass goes on
    assert names(cluster.take()) == ["create_nodeclaim"]
    getattr(cluster, failure).clear()
    assert await objects.keep_lifecycle() == 1
    assert names(cluster.take()) == ["patch_nodeclaim_status"]  # created already: not asked again


async def test_a_bug_is_not_taken_for_an_outage():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)

    async def broken(nodeclaim: dict[str, Any]) -> None:
        raise KeyError("spec")

    cluster.create_nodeclaim = broken  # type: ignore[method-assign]
    with pytest.raises(KeyError):
        await objects.keep_lifecycle()


async def test_a_new_leader_writes_everything_again():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, REGISTERED, records=records)
    await objects.keep_lifecycle()
    first = cluster.take()
    await objects.restart()
    await objects.keep_lifecycle()
    assert cluster.take() == first


async def test_a_garbage_collected_claim_is_deleted_and_released():
    objects, cluster, _ = writer()
    objects.release(["gone-1"])
    cluster.missing.add("delete_nodeclaim")  # deleted already: its finalizer still goes
    await objects.keep_lifecycle()
    assert cluster.take() == [("remove_finalizer", "NodeClaim", "gone-1", "karpenter.sh/termination")]
    await objects.keep_lifecycle()
    assert cluster.take() == []


async def test_an_ended_claim_is_not_written_again():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)
    cluster.failing.add("create_nodeclaim")
    await objects.keep_lifecycle()
    cluster.failing.clear()
    fold(c.NodeClaimTerminated(nodeclaim=CLAIM, nodepool="general"), records=records)
    await objects.keep_lifecycle()
    assert cluster.take() == []


async def test_without_a_cluster_nothing_is_written():
    records = NodeClaimRecords()
    objects = NodeClaimWriter(None, records)
    fold(pool_applied(), CREATED, LAUNCHED, records=records)
    assert await objects.keep_lifecycle() == 0
    assert await objects.keep_judgments({}, T0) == 0


DRIFTED = Judgment(drifted="NodePoolDrifted", drifted_since=T0 + timedelta(minutes=5))


async def test_disruption_writes_its_judgments_and_the_lifecycle_with_them():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)
    steps = [
        ({}, ["Registered=Unknown", "Initialized=Unknown", "Launched=True", "Ready=Unknown"]),  # first: all
        ({}, None),  # unchanged
        (
            {CLAIM: DRIFTED},
            ["Registered=Unknown", "Initialized=Unknown", "Launched=True", "Drifted=True", "Ready=Unknown"],
        ),
        ({CLAIM: DRIFTED}, None),
    ]
    for judged, conditions in steps:
        await objects.keep_judgments(judged, T0)
        calls = cluster.take()
        assert calls == ([] if conditions is None else [("patch_nodeclaim_status", CLAIM, tuple(conditions))])
    fold(REGISTERED, records=records)  # the scheduler's write drops Drifted: disruption states it again
    await objects.keep_judgments({CLAIM: DRIFTED}, T0)
    assert cluster.take()[0][2][-2:] == ("Drifted=True", "Ready=Unknown")
    await objects.keep_judgments({}, T0)  # no longer drifted: said once
    (written,) = [call[2] for call in cluster.take()]
    assert "Registered=True" in written and "Drifted=True" not in written
    fold(INITIALIZED, records=records)  # nothing of disruption's: the lifecycle is the scheduler's to write
    await objects.keep_judgments({}, T0)
    assert cluster.take() == []
    await objects.keep_judgments({}, T0 + REFRESH)  # but everything is stated again now and then
    assert names(cluster.take()) == ["patch_nodeclaim_status"]


async def test_disruption_retries_a_judgment_the_api_did_not_take():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)
    await objects.keep_judgments({}, T0)
    cluster.take()
    cluster.failing.add("patch_nodeclaim_status")
    await objects.keep_judgments({CLAIM: DRIFTED}, T0 + timedelta(seconds=10))
    cluster.failing.clear()
    await objects.keep_judgments({CLAIM: DRIFTED}, T0 + timedelta(seconds=20))
    assert [call[2][-2] for call in cluster.take()] == ["Drifted=True"]


async def test_a_pass_runs_in_the_background_and_a_bug_in_it_is_raised_by_the_next_kick():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)
    answer = asyncio.Event()

    async def slow(nodeclaim: dict[str, Any]) -> None:
        await answer.wait()
        raise KeyError("spec")

    cluster.create_nodeclaim = slow  # type: ignore[method-assign]
    objects.kick(objects.keep_lifecycle)  # returns at once: the API has not answered
    objects.kick(objects.keep_lifecycle)  # one pass at a time: this one waits for the next kick
    answer.set()
    with pytest.raises(KeyError):
        await objects.settled()


async def test_stopping_never_waits_for_the_api():
    objects, cluster, records = writer()
    fold(pool_applied(), CREATED, LAUNCHED, records=records)

    async def hang(nodeclaim: dict[str, Any]) -> None:
        await asyncio.Event().wait()

    cluster.create_nodeclaim = hang  # type: ignore[method-assign]
    objects.kick(objects.keep_lifecycle)
    await asyncio.sleep(0)
    await objects.stop()  # the pass is cancelled, not waited for
    assert objects.dirty == {CLAIM}  # and its claim waits for the next leader's pass
