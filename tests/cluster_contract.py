"""The `Cluster` port's contract: one set of cases every implementation passes.

tests/integration/test_cluster_contract.py runs each case against `KubeCluster` over the sim's
API server and against the in-process double (services/sim/inprocess.py), each over a sim `World`
the case changes directly, as the rest of a cluster would. A case gets a `Harness`: the port,
the world, and `changed()`, to call after changing the world behind the port's back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest

from services.sim.cluster import Node, PodDisruptionBudget
from services.sim.world import World
from shared.api.core import Taint, TaintEffect
from shared.api.labels import HOSTNAME_LABEL, TERMINATION_FINALIZER
from shared.api.pod import LabelSelector
from shared.api.scenario import parse_scenario
from shared.ports.cluster import (
    DAEMONSET,
    DELETED,
    NODE,
    NODECLAIM,
    NODEPOOL,
    PDB,
    POD,
    Cluster,
    ClusterError,
    EvictionRefused,
    Gone,
    KubeEvent,
    NotFound,
    WatchEvent,
)
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc

START = datetime(2026, 11, 23, 9, tzinfo=UTC)
SCENARIO = scenario_doc(
    "contract",
    nodePools=[nodepool_doc(**{"metadata.name": "general"})],
    daemonSets=[
        {"name": "exporter", "requests": {"cpu": "100m", "memory": "128Mi"}, "tolerations": [{"operator": "Exists"}]}
    ],
    workloads=[
        {"name": "web", "replicas": 2, "requests": {"cpu": "500m", "memory": "1Gi"}, "pdb": {"minAvailable": 1}},
        {"name": "db", "replicas": 1, "requests": {"cpu": "1"}},
    ],
)
WAIT_SECONDS = 10.0
BOOKMARKED_ROUNDS = 30


def new_world() -> World:
    """The scenario at its start with two Ready nodes (one holds every pod that fits first)."""
    world = World(parse_scenario(SCENARIO))
    for name in ("n-1", "n-2"):
        capacity = {"cpu": Decimal(8), "memory": Decimal(32 * 2**30), "pods": Decimal(110)}
        labels = {HOSTNAME_LABEL: name, "karpenter.sh/nodepool": "general"}
        world.cluster.add_node(Node(name, f"sim:///{name}", labels, [], capacity, capacity, START, ready=True))
    world.advance(START)
    return world


@dataclass
class Harness:
    cluster: Cluster
    world: World
    changed: Callable[[], Awaitable[None]] = field(default=lambda: asyncio.sleep(0))
    """After a change made to the world directly: whatever lets the implementation see it."""


Case = Callable[[Harness], Awaitable[None]]
CASES: dict[str, Case] = {}


def case(run: Case) -> Case:
    CASES[run.__name__] = run
    return run


def served(event: WatchEvent) -> tuple[int, str, str, str, dict[str, Any]]:
    """A change as comparable across implementations: the API's own resourceVersion left out of
    the objects served whole (NodePools and NodeClaims carry it; the sim keeps it beside them)."""
    obj = event.object
    if event.kind in (NODEPOOL, NODECLAIM):
        obj = {**obj, "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}}
    return event.resource_version, event.kind, event.action, event.key, obj


async def collect(cluster: Cluster, after: int, until: Callable[[list[WatchEvent]], bool]) -> list[WatchEvent]:
    """Changes from `after` until `until` holds of all seen so far."""
    seen: list[WatchEvent] = []

    async def follow() -> None:
        async for change in cluster.watch(after):
            seen.append(change)
            if until(seen):
                return

    await asyncio.wait_for(follow(), WAIT_SECONDS)
    return seen


def world_changes(world: World, after: int) -> list[tuple[int, str, str, str, dict[str, Any]]]:
    return [served(e) for e in world.cluster.changes_since(after)]


# --- informers -----------------------------------------------------------------------------------


@case
async def the_flattened_shapes_are_the_sims_own(h: Harness) -> None:
    """Listed through the implementation, every object equals what the sim's world holds."""
    claim = {"metadata": {"name": "general-z", "finalizers": [TERMINATION_FINALIZER]}, "spec": {}}
    h.world.cluster.create_custom(NODECLAIM, {"apiVersion": "karpenter.sh/v1", "kind": NODECLAIM, **claim}, START)
    await h.changed()
    snapshot = await h.cluster.snapshot()
    expected = h.world.cluster.snapshot()
    assert snapshot.resource_version == expected.resource_version
    assert sorted(map(served, snapshot.objects)) == sorted(map(served, expected.objects))
    kinds = {e.kind for e in snapshot.objects}
    assert kinds == {POD, NODE, PDB, DAEMONSET, NODEPOOL, NODECLAIM}


@case
async def a_watch_from_a_list_sees_every_later_change_in_order(h: Harness) -> None:
    snapshot = await h.cluster.snapshot()
    await h.cluster.taint("n-2", Taint(key="example.com/maintenance", effect=TaintEffect.NO_SCHEDULE))
    h.world.cluster.workloads["default/web"].replicas = 4
    h.world.advance(START)
    await h.changed()
    expected = world_changes(h.world, snapshot.resource_version)
    seen = await collect(h.cluster, snapshot.resource_version, lambda s: len(s) >= len(expected))
    assert sorted(map(served, seen)) == expected
    for kind in {e.kind for e in seen}:
        versions = [e.resource_version for e in seen if e.kind == kind]
        assert versions == sorted(versions) and versions[0] > snapshot.resource_version


@case
async def a_watch_goes_on_while_the_history_before_it_is_dropped(h: Harness) -> None:
    """Bookmarks: a kind that does not change while others do resumes from where the server
    last said it was, not from the dropped history, when its watch is opened again. Changes
    come slower than the server bookmarks past the kept history of them (bookmarks come each second)."""
    with mock.patch.object(h.world.cluster, "history", 10):
        snapshot = await h.cluster.snapshot()
        seen: list[WatchEvent] = []

        async def follow() -> None:
            async for change in h.cluster.watch(snapshot.resource_version):
                seen.append(change)

        following = asyncio.create_task(follow())
        try:
            for round_ in range(BOOKMARKED_ROUNDS):
                await h.cluster.label_node("n-1", {"example.com/round": str(round_)})
                await _until(lambda r=str(round_): any(e.object["labels"].get("example.com/round") == r for e in seen))
                await asyncio.sleep(0.12)  # watches end and are opened again meanwhile
            with pytest.raises(Gone):
                h.world.cluster.changes_since(snapshot.resource_version)  # dropped: the snapshot's
            await h.cluster.patch_nodepool_status("general", {"nodes": 7})
            await _until(lambda: any(e.kind == NODEPOOL for e in seen))
            assert not following.done()  # no Gone, no error: it went on
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        assert [e.object["status"]["nodes"] for e in seen if e.kind == NODEPOOL] == [7]


@case
async def a_watch_from_dropped_history_is_gone_and_a_new_list_follows_on(h: Harness) -> None:
    with mock.patch.object(h.world.cluster, "history", 3):
        snapshot = await h.cluster.snapshot()
        for round_ in range(10):
            await h.cluster.label_node("n-2", {"example.com/round": str(round_)})
        with pytest.raises(Gone):
            await collect(h.cluster, snapshot.resource_version, lambda s: False)
        again = await h.cluster.snapshot()
        assert again.resource_version == h.world.cluster.resource_version
        await h.cluster.label_node("n-2", {"example.com/round": "last"})
        (change,) = await collect(h.cluster, again.resource_version, lambda s: len(s) == 1)
        assert (change.kind, change.key, change.object["labels"]["example.com/round"]) == (NODE, "n-2", "last")


async def _until(check: Callable[[], bool]) -> None:
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), WAIT_SECONDS)


# --- writes under optimistic locking -------------------------------------------------------------


@case
async def writes_at_once_to_one_node_all_land(h: Harness) -> None:
    """Each read-change-write that finds the node changed since its read reads again."""
    taints = [Taint(key=f"example.com/t{i}", effect=TaintEffect.NO_SCHEDULE) for i in range(6)]
    labels = [{f"example.com/l{i}": "x"} for i in range(6)]
    await asyncio.gather(
        *(h.cluster.taint("n-2", t) for t in taints), *(h.cluster.label_node("n-2", lab) for lab in labels)
    )
    node = h.world.cluster.nodes["n-2"]
    assert {t.key for t in node.taints} == {t.key for t in taints}
    assert all(node.labels.get(k) == "x" for lab in labels for k in lab)
    await h.cluster.untaint("n-2", "example.com/t0", TaintEffect.NO_SCHEDULE)
    await h.cluster.untaint("n-2", "example.com/t1")
    assert {t.key for t in h.world.cluster.nodes["n-2"].taints} == {t.key for t in taints[2:]}


@case
async def writes_to_what_is_not_there_are_not_found(h: Harness) -> None:
    taint = Taint(key="example.com/t", effect=TaintEffect.NO_SCHEDULE)
    for write in (
        h.cluster.taint("nope", taint),
        h.cluster.label_node("nope", {"a": "b"}),
        h.cluster.delete_node("nope"),
        h.cluster.delete_pod("default/nope"),
        h.cluster.set_nodepool_condition("nope", {"type": "Ready", "status": "True"}),
        h.cluster.patch_nodepool_status("nope", {"nodes": 1}),
        h.cluster.patch_nodeclaim_status("nope", {"nodeName": "x"}),
    ):
        with pytest.raises(NotFound):
            await write


# --- finalizers ----------------------------------------------------------------------------------


@case
async def a_finalizer_holds_a_deleted_node_until_it_is_removed(h: Harness) -> None:
    await h.cluster.add_finalizer(NODE, "n-2", TERMINATION_FINALIZER)
    await h.cluster.add_finalizer(NODE, "n-2", TERMINATION_FINALIZER)  # once is enough
    assert h.world.cluster.nodes["n-2"].finalizers == [TERMINATION_FINALIZER]
    await h.cluster.delete_node("n-2")
    held = h.world.cluster.nodes["n-2"]
    assert held.deletion_timestamp is not None
    await h.cluster.remove_finalizer(NODE, "n-2", TERMINATION_FINALIZER)
    assert "n-2" not in h.world.cluster.nodes
    await h.cluster.remove_finalizer(NODE, "n-2", TERMINATION_FINALIZER)  # gone: done


@case
async def a_nodeclaim_is_created_once_and_its_finalizer_holds_its_deletion(h: Harness) -> None:
    claim = {
        "metadata": {
            "name": "general-abc",
            "labels": {"karpenter.sh/nodepool": "general"},
            "finalizers": [TERMINATION_FINALIZER],
        },
        "spec": {"nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "default"}},
    }
    await h.cluster.create_nodeclaim(claim)
    created = h.world.cluster.nodeclaims["general-abc"]  # with the CRD's defaults, where the API applies them
    await h.cluster.create_nodeclaim({**claim, "spec": {"changed": True}})  # there already: left as it is
    stored = h.world.cluster.nodeclaims["general-abc"]
    assert stored == created and stored["spec"]["nodeClassRef"] == claim["spec"]["nodeClassRef"]
    assert stored["metadata"]["finalizers"] == [TERMINATION_FINALIZER]
    launched = {
        "type": "Launched",
        "status": "True",
        "reason": "Launched",
        "message": "",
        "lastTransitionTime": "2026-11-23T09:00:00Z",
    }
    await h.cluster.patch_nodeclaim_status("general-abc", {"providerID": "sim:///i-1", "conditions": [launched]})
    await h.cluster.patch_nodeclaim_status("general-abc", {"nodeName": "n-1"})
    status = h.world.cluster.nodeclaims["general-abc"]["status"]
    assert status == {"providerID": "sim:///i-1", "conditions": [launched], "nodeName": "n-1"}
    await h.cluster.annotate_nodeclaim("general-abc", "general", {"karpenter.sh/nodeclaim-termination-timestamp": "x"})
    held = h.world.cluster.nodeclaims["general-abc"]["metadata"]
    assert held["deletionTimestamp"] and held["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"] == "x"
    await h.cluster.delete_nodeclaim("general-abc")  # asked again: still held
    assert "general-abc" in h.world.cluster.nodeclaims
    await h.cluster.remove_finalizer(NODECLAIM, "general-abc", TERMINATION_FINALIZER)
    assert "general-abc" not in h.world.cluster.nodeclaims
    await h.cluster.remove_finalizer(NODECLAIM, "general-abc", TERMINATION_FINALIZER)


# --- evictions -----------------------------------------------------------------------------------


@case
async def evictions_answer_as_the_pods_budgets_allow(h: Harness) -> None:
    web = sorted(k for k in h.world.cluster.pods if k.startswith("default/web-"))
    assert all(h.world.cluster.pods[k].node_name for k in web)
    await h.cluster.evict(web[0])  # 2 healthy, minAvailable 1: allowed
    assert web[0] not in h.world.cluster.pods
    with pytest.raises(EvictionRefused):
        await h.cluster.evict(web[1])  # 1 healthy, minAvailable 1: refused
    with pytest.raises(NotFound):
        await h.cluster.evict("default/nope")
    db = next(k for k in h.world.cluster.pods if k.startswith("default/db-"))
    for name in ("db-a", "db-b"):  # two budgets over one pod: the API's 500
        selector = LabelSelector(match_labels={"app": "db"})
        h.world.cluster.apply_pdb(PodDisruptionBudget("default", name, selector, min_available=0))
    await h.changed()
    with pytest.raises(ClusterError) as refused:
        await h.cluster.evict(db)
    assert not isinstance(refused.value, EvictionRefused | NotFound) and db in h.world.cluster.pods
    answers = h.world.cluster.eviction_requests
    assert (answers[web[0]], answers[web[1]], answers[db]) == ({"200": 1}, {"429": 1}, {"500": 1})


@case
async def a_deletion_at_a_grace_period_is_a_forced_one(h: Harness) -> None:
    web = sorted(k for k in h.world.cluster.pods if k.startswith("default/web-"))
    await h.cluster.delete_pod(web[0], grace_seconds=0)
    await h.cluster.delete_pod(web[1])
    assert not set(web) & set(h.world.cluster.pods)
    assert h.world.cluster.forced_deletions == 1


# --- NodePool status and Events ------------------------------------------------------------------


@case
async def a_nodepools_status_takes_conditions_by_type_and_merges_the_rest(h: Harness) -> None:
    valid = {
        "type": "ValidationSucceeded",
        "status": "True",
        "reason": "ValidationSucceeded",
        "message": "",
        "lastTransitionTime": "2026-11-23T09:00:00Z",
    }
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": "2026-11-23T09:00:00Z",
    }
    await h.cluster.set_nodepool_condition("general", valid)
    await h.cluster.set_nodepool_condition("general", ready)
    await h.cluster.set_nodepool_condition("general", {**valid, "status": "False", "reason": "ValidationFailed"})
    await h.cluster.patch_nodepool_status("general", {"resources": {"cpu": "16", "nodes": "2"}, "nodes": 2})
    status = h.world.cluster.nodepools["general"]["status"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Ready", "True"),
        ("ValidationSucceeded", "False"),
    ]
    assert status["resources"] == {"cpu": "16", "nodes": "2"} and status["nodes"] == 2


@case
async def a_repeated_event_bumps_its_count(h: Harness) -> None:
    event = KubeEvent(POD, "default/web-1", "Warning", "FailedScheduling", "no nodepool fits", "uid-1")
    await asyncio.gather(*(h.cluster.record_event(event) for _ in range(2)))  # at once: one Event
    await h.cluster.record_event(event)
    await h.cluster.record_event(KubeEvent(NODE, "n-1", "Normal", "DisruptionBlocked", "pdb default/web"))
    about_pod = h.world.cluster.events_about(POD, "default/web-1")
    assert [(e["reason"], e["message"], e["count"], e["uid"]) for e in about_pod] == [
        ("FailedScheduling", "no nodepool fits", 3, "uid-1")
    ]
    assert [(e["reason"], e["count"]) for e in h.world.cluster.events_about(NODE, "n-1")] == [("DisruptionBlocked", 1)]


@case
async def a_deleted_object_is_a_deleted_change(h: Harness) -> None:
    snapshot = await h.cluster.snapshot()
    await h.cluster.delete_node("n-2")  # no finalizer: gone at once
    h.world.cluster.delete_pdb("default/web")
    await h.changed()
    seen = await collect(
        h.cluster,
        snapshot.resource_version,
        lambda s: {(e.kind, e.action) for e in s} >= {(NODE, DELETED), (PDB, DELETED)},
    )
    gone = {(e.kind, e.key) for e in seen if e.action == DELETED and e.kind in (NODE, PDB)}
    assert gone == {(NODE, "n-2"), (PDB, "default/web")}


# --- node classes --------------------------------------------------------------------------------


@case
async def a_nodeclass_is_read_with_its_status_and_a_missing_one_is_none(h: Harness) -> None:
    document = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {"role": "NodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
    }
    created = h.world.cluster.create_custom("EC2NodeClass", document, START)
    h.world.cluster.update_custom("EC2NodeClass", {**created, "status": {"instanceProfile": "p"}})
    await h.changed()
    found = await h.cluster.get_nodeclass("default")
    assert found is not None and found["spec"]["role"] == "NodeRole" and found["status"]["instanceProfile"] == "p"
    assert await h.cluster.get_nodeclass("absent") is None
