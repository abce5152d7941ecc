"""The EC2NodeClass controller in the watcher: a class resolved writes its status, records a
NodeClassStatusChanged only when readiness or what it resolved to changes (rebuilt from the log
after a restart), and a NodePool's NodeClassReady follows its class as upstream's readiness
controller sets it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from services.watcher.nodeclasses import (
    TERMINATING,
    TERMINATION_FINALIZER,
    WAITING,
    NodeClassController,
    NodeClasses,
)
from services.watcher.pool_status import NOT_FOUND, SIM_CLASS, UNKNOWN, conditions, nodeclass_state
from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.nodeclass import Found, FoundImage, FoundSecurityGroup, FoundSubnet, resolve
from shared.events import contracts as c
from shared.policy.pool_state import PoolCounters
from shared.ports.cloud import CloudError
from shared.ports.cluster import (
    ADDED,
    DELETED,
    EC2NODECLASS,
    MODIFIED,
    NODECLAIM,
    ClusterError,
    KubeEvent,
    NotFound,
    WatchEvent,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)
SPEC = {
    "role": "NodeRole",
    "amiSelectorTerms": [{"alias": "al2023@latest"}],
    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
}
FOUND = Found(
    [FoundSubnet("subnet-1", "us-east-1a", "use1-az1", 10)],
    [FoundSecurityGroup("sg-1", "nodes")],
    [FoundImage("ami-1", "al2023", "x86_64", "2026-01-01T00:00:00Z")],
    "profile",
)


class FakeResolver:
    """Resolves with the pure core over what the test says EC2 holds (`found`); a clean-up is
    recorded (class, uid), and fails while `cleanup_fails` holds an error."""

    def __init__(self, found: Found | Exception) -> None:
        self.found = found
        self.cleaned: list[tuple[str, str | None]] = []
        self.cleanup_fails: Exception | None = None

    async def resolve(self, nodeclass: EC2NodeClass, now: datetime, previous: Any = ()) -> Any:
        if isinstance(self.found, Exception):
            raise self.found
        return resolve(nodeclass, self.found, now, previous)

    async def clean_up(self, nodeclass: str, uid: str | None = None) -> Any:
        if self.cleanup_fails is not None:
            raise self.cleanup_fails
        self.cleaned.append((nodeclass, uid))
        return ()


class FakeCluster:
    """The Cluster port's finalizer writes, recorded as (add or remove, kind, name, finalizer),
    and its Events."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str]] = []
        self.events: list[KubeEvent] = []

    async def record_event(self, event: KubeEvent) -> None:
        self.events.append(event)

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self.calls.append(("add", kind, name, finalizer))

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self.calls.append(("remove", kind, name, finalizer))


def _harness(found: Found | Exception, classes: NodeClasses | None = None):
    classes = classes or NodeClasses()
    classes.observe(WatchEvent(1, EC2NODECLASS, ADDED, "default", {"metadata": {"name": "default"}, "spec": SPEC}))
    patched: list[tuple[str, dict[str, Any]]] = []
    recorded: list[c.Event] = []

    async def patch(name: str, status: dict[str, Any]) -> None:
        patched.append((name, status))

    async def record(facts: Any) -> None:
        recorded.extend(f.event for f in facts)

    controller = NodeClassController(FakeResolver(found), classes, patch, record, lambda: NOW, cluster=FakeCluster())
    return controller, classes, patched, recorded


def test_a_resolved_class_writes_its_status_and_records_its_readiness_once():
    controller, classes, patched, recorded = _harness(FOUND)
    asyncio.run(controller.reconcile("default"))
    asyncio.run(controller.reconcile("default"))
    assert [name for name, _ in patched] == ["default", "default"]
    assert patched[0][1]["subnets"] == [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"}]
    assert recorded == [
        c.NodeClassStatusChanged(
            nodeclass="default",
            ready=True,
            reason="Ready",
            subnets=["subnet-1"],
            security_groups=["sg-1"],
            amis=["ami-1"],
        )
    ]
    assert classes.readiness("default") == (True, "Ready", "")


def test_a_change_of_readiness_is_recorded_and_a_restart_records_nothing_new():
    controller, classes, _, recorded = _harness(FOUND)
    asyncio.run(controller.reconcile("default"))
    controller.resolver = FakeResolver(Found([], FOUND.security_groups, FOUND.images, "profile"))
    asyncio.run(controller.reconcile("default"))
    assert [(e.ready, e.reason) for e in recorded] == [(True, "Ready"), (False, "UnhealthyDependents")]
    assert recorded[1].message == "SubnetsReady=False, ValidationSucceeded=False"
    restarted = NodeClasses()
    restarted.remember(recorded)
    again, _, _, more = _harness(Found([], FOUND.security_groups, FOUND.images, "profile"), restarted)
    asyncio.run(again.reconcile("default"))
    assert more == []
    back = classes.fact(
        "default", resolve(EC2NodeClass.model_validate({"metadata": {"name": "default"}, "spec": SPEC}), FOUND, NOW)
    )
    first = NodeClasses().fact(
        "default", resolve(EC2NodeClass.model_validate({"metadata": {"name": "default"}, "spec": SPEC}), FOUND, NOW)
    )
    assert back is not None and first is not None
    assert back.event == first.event and back.event_id != first.event_id  # ready again: a new fact, not a repeat


@pytest.mark.parametrize("failure", [CloudError("EC2 throttled"), NotFound("gone")])
def test_a_failed_resolution_writes_and_records_nothing(failure):
    controller, _, patched, recorded = _harness(failure)
    asyncio.run(controller.reconcile("default"))
    assert (patched, recorded) == ([], [])


def test_a_deleted_class_is_forgotten():
    classes = NodeClasses()
    classes.observe(WatchEvent(1, EC2NODECLASS, ADDED, "default", {"spec": SPEC}))
    assert not classes.observe(WatchEvent(2, EC2NODECLASS, ADDED, "default", {"spec": SPEC, "status": {}}))
    classes.observe(WatchEvent(3, EC2NODECLASS, DELETED, "default", {}))
    assert classes.documents == {}


def test_a_deleted_class_is_recorded_not_found_once_and_its_pools_told():
    """Upstream's pools on a deleted class turn NodeClassNotFound; the passes gate on the log's
    last fact of the class, so the deletion is one, and the pools write their conditions again."""
    controller, classes, _, recorded = _harness(FOUND)
    told: list[str] = []

    async def changed(name: str) -> None:
        told.append(name)

    controller.changed = changed
    asyncio.run(controller.reconcile("default"))
    assert classes.observe(WatchEvent(2, EC2NODECLASS, DELETED, "default", {}))  # the log knows it: look again
    asyncio.run(controller.reconcile("default"))
    asyncio.run(controller.reconcile("default"))  # said once
    assert [(e.ready, e.reason, e.message) for e in recorded] == [
        (True, "Ready", ""),
        (False, "NodeClassNotFound", "NodeClass not found on cluster"),
    ]
    assert told == ["default", "default"] and classes.readiness("default") is None
    assert classes.known() == ["default"]  # the periodic pass still looks: created again, resolved again


def test_a_class_the_log_never_held_leaves_no_fact_when_deleted():
    classes = NodeClasses()
    classes.observe(WatchEvent(1, EC2NODECLASS, ADDED, "new", {"spec": SPEC}))
    assert not classes.observe(WatchEvent(2, EC2NODECLASS, DELETED, "new", {}))
    assert classes.gone("new") is None and classes.known() == []


def _deleted(classes: NodeClasses, controller: NodeClassController) -> None:
    """The class resolved (the log holds it), then deleted with its last state (its uid)."""
    asyncio.run(controller.reconcile("default"))
    classes.observe(WatchEvent(2, EC2NODECLASS, DELETED, "default", {"metadata": {"name": "default", "uid": "u-1"}}))


def _claim(name: str, nodeclass: str = "default", action: str = ADDED) -> WatchEvent:
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass}
    return WatchEvent(3, NODECLAIM, action, name, {"metadata": {"name": name}, "spec": {"nodeClassRef": ref}})


def test_a_deleted_class_nothing_uses_is_cleaned_up_once():
    controller, classes, _, _ = _harness(FOUND)
    _deleted(classes, controller)
    asyncio.run(controller.reconcile("default"))
    asyncio.run(controller.reconcile("default"))  # the periodic pass: done already
    assert controller.resolver.cleaned == [("default", "u-1")]


def test_a_class_is_cleaned_up_only_once_its_nodeclaims_are_gone():
    """Upstream waits on the NodeClaims naming the class; the last one gone wakes the class."""
    controller, classes, _, _ = _harness(FOUND)
    assert classes.observe_claim(_claim("default-a")) is None
    classes.observe_claim(_claim("other-b", "other"))
    _deleted(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [] and classes.users("default", {}) == ["default-a"]
    assert classes.observe_claim(_claim("other-b", "other", DELETED)) is None  # not a class gone
    assert classes.observe_claim(_claim("default-a", action=DELETED)) == "default"
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [("default", "u-1")]


def test_a_pool_on_the_class_with_live_claims_in_the_log_holds_it():
    """A launch's object is written just after it: the log's live claims of a pool on the class
    hold it meanwhile; a pool no longer in force, or on another class, does not."""
    controller, classes, _, _ = _harness(FOUND)
    counters = {
        "web": PoolCounters("web", _pool("EC2NodeClass"), nodes=1),
        "gone": PoolCounters("gone", None, nodes=2),
        "gpu": PoolCounters("gpu", _pool("EC2NodeClass", "gpu"), nodes=3),
    }

    async def pools() -> dict[str, PoolCounters]:
        return counters

    controller.pools = pools
    _deleted(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [] and classes.users("default", counters) == ["nodepool web"]
    counters["web"].nodes = 0
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [("default", "u-1")]


def test_a_failed_clean_up_is_tried_again_on_the_next_pass(caplog):
    controller, classes, _, _ = _harness(FOUND)
    controller.resolver.cleanup_fails = CloudError("deleting launch templates, lt-1: throttled")
    _deleted(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [] and "deleting launch templates, lt-1" in caplog.text
    controller.resolver.cleanup_fails = None
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [("default", "u-1")]


def test_nothing_is_cleaned_up_before_the_cluster_is_listed():
    """Before the list every class the log holds looks deleted: deleting then would be a guess."""
    controller, classes, _, _ = _harness(FOUND)
    synced = False
    controller.synced = lambda: synced
    _deleted(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == []
    synced = True
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [("default", "u-1")]


def test_before_the_list_a_class_the_log_holds_is_not_recorded_gone_but_looked_at_again():
    """A restarted watcher knows the log's classes before the cluster's list: one absent from its
    documents then is not known to be deleted, so nothing is recorded and it stays pending."""
    controller, classes, _, recorded = _harness(FOUND)
    asyncio.run(controller.reconcile("default"))
    restarted = NodeClasses(recorded=dict(classes.recorded), changes=dict(classes.changes))
    synced = False
    controller.classes, controller.synced = restarted, lambda: synced
    asyncio.run(controller.reconcile("default"))
    assert [e.reason for e in recorded] == ["Ready"] and controller.pending == {"default"}
    synced = True
    asyncio.run(controller.reconcile("default"))  # listed, and truly gone
    assert [e.reason for e in recorded] == ["Ready", "NodeClassNotFound"]


def test_a_class_made_again_is_not_cleaned_up():
    controller, classes, _, _ = _harness(FOUND)
    _deleted(classes, controller)
    classes.observe(WatchEvent(4, EC2NODECLASS, ADDED, "default", {"metadata": {"name": "default"}, "spec": SPEC}))
    assert not classes.waiting("default")


# --- the finalizer: a class's deletion held until its clean-up ------------------------------------


def _document(*, finalizers: tuple[str, ...] = (), deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "default", "uid": "u-1", "finalizers": list(finalizers)}
    if deleting:
        metadata["deletionTimestamp"] = "2026-03-01T00:05:00Z"
    return {"metadata": metadata, "spec": SPEC}


def _finalized(classes: NodeClasses, controller: NodeClassController) -> None:
    """The class resolved and given the finalizer (the API's change seen), then deleted: marked."""
    asyncio.run(controller.reconcile("default"))
    classes.observe(WatchEvent(2, EC2NODECLASS, MODIFIED, "default", _document(finalizers=(TERMINATION_FINALIZER,))))
    assert classes.observe(
        WatchEvent(3, EC2NODECLASS, MODIFIED, "default", _document(finalizers=(TERMINATION_FINALIZER,), deleting=True))
    )  # the deletion asked for: looked at at once, though the spec is the same


def test_a_resolved_class_is_given_the_finalizer_once():
    """Upstream adds `karpenter.k8s.aws/termination` before it resolves; one carrying it is not
    written again."""
    controller, classes, _, _ = _harness(FOUND)
    asyncio.run(controller.reconcile("default"))
    assert controller.cluster.calls == [("add", EC2NODECLASS, "default", TERMINATION_FINALIZER)]
    classes.observe(WatchEvent(2, EC2NODECLASS, MODIFIED, "default", _document(finalizers=(TERMINATION_FINALIZER,))))
    asyncio.run(controller.reconcile("default"))
    assert len(controller.cluster.calls) == 1


def test_a_terminating_class_nodeclaims_use_is_held_and_its_pools_told():
    """Deleted while a NodeClaim names it: recorded not ready (NodeClassTerminating, as upstream's
    pools say), nothing deleted in AWS, the finalizer kept; pass after pass, said once."""
    controller, classes, _, recorded = _harness(FOUND)
    told: list[str] = []

    async def changed(name: str) -> None:
        told.append(name)

    controller.changed = changed
    classes.observe_claim(_claim("default-a"))
    _finalized(classes, controller)
    asyncio.run(controller.reconcile("default"))
    asyncio.run(controller.reconcile("default"))
    assert [(e.ready, e.reason, e.message) for e in recorded] == [
        (True, "Ready", ""),
        (False, "NodeClassTerminating", "NodeClass is Terminating"),
    ]
    assert told == ["default", "default"] and classes.readiness("default") == (
        False,
        "NodeClassTerminating",
        "NodeClass is Terminating",
    )
    assert (
        nodeclass_state(_pool("EC2NodeClass"), True, {"default": TERMINATING}, {"default"})[1] == "NodeClassTerminating"
    )
    assert not classes.states()["default"].ready  # what the services plan with: nothing launched
    assert controller.resolver.cleaned == []
    assert [call[0] for call in controller.cluster.calls] == ["add"]  # never removed
    assert classes.waiting("default")
    waiting = KubeEvent(
        EC2NODECLASS, "default", "Normal", WAITING, "Waiting on NodeClaim termination for default-a", "u-1"
    )
    assert controller.cluster.events == [waiting, waiting]  # each pass, as upstream's requeue repeats it


def test_its_last_nodeclaim_gone_the_class_is_cleaned_up_then_let_go():
    """The claim's end wakes the class: what it made is deleted first, then the finalizer goes,
    and the API's deletion that follows records it gone without a second clean-up."""
    controller, classes, _, recorded = _harness(FOUND)
    order: list[str] = []
    resolver, finalizers = controller.resolver, controller.cluster
    clean_up, remove = resolver.clean_up, finalizers.remove_finalizer

    async def cleaning(name: str, uid: str | None = None) -> Any:
        order.append("clean_up")
        return await clean_up(name, uid)

    async def removing(kind: str, name: str, finalizer: str) -> None:
        order.append("remove_finalizer")
        await remove(kind, name, finalizer)

    resolver.clean_up, finalizers.remove_finalizer = cleaning, removing
    classes.observe_claim(_claim("default-a"))
    _finalized(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert order == []
    assert classes.observe_claim(_claim("default-a", action=DELETED)) == "default"
    asyncio.run(controller.reconcile("default"))
    assert order == ["clean_up", "remove_finalizer"] and resolver.cleaned == [("default", "u-1")]
    assert finalizers.calls[-1] == ("remove", EC2NODECLASS, "default", TERMINATION_FINALIZER)
    assert classes.observe(WatchEvent(4, EC2NODECLASS, DELETED, "default", _document(deleting=True)))
    asyncio.run(controller.reconcile("default"))
    asyncio.run(controller.reconcile("default"))
    assert order == ["clean_up", "remove_finalizer"] and classes.uids == {}
    assert [e.reason for e in recorded] == ["Ready", "NodeClassTerminating", "NodeClassNotFound"]


def test_a_failed_removal_of_the_finalizer_is_tried_again_without_cleaning_again(caplog):
    controller, classes, _, _ = _harness(FOUND)
    finalizers = controller.cluster
    remove = finalizers.remove_finalizer
    failures = [ClusterError("PATCH ec2nodeclasses/default: 500")]

    async def removing(kind: str, name: str, finalizer: str) -> None:
        if failures:
            raise failures.pop()
        await remove(kind, name, finalizer)

    finalizers.remove_finalizer = removing
    _finalized(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert "removing termination finalizer" in caplog.text and [c[0] for c in finalizers.calls] == ["add"]
    asyncio.run(controller.reconcile("default"))
    assert [c[0] for c in finalizers.calls] == ["add", "remove"]
    assert controller.resolver.cleaned == [("default", "u-1")]


def test_a_terminating_class_without_the_finalizer_is_cleaned_up_once_gone():
    """Made before the finalizer (another's holds it): not ready at once, but its clean-up is
    today's, once the API has let it go."""
    controller, classes, _, recorded = _harness(FOUND)
    asyncio.run(controller.reconcile("default"))
    classes.observe(WatchEvent(2, EC2NODECLASS, MODIFIED, "default", _document(finalizers=("example.com/f",))))
    classes.observe(
        WatchEvent(3, EC2NODECLASS, MODIFIED, "default", _document(finalizers=("example.com/f",), deleting=True))
    )
    asyncio.run(controller.reconcile("default"))
    assert recorded[-1].reason == "NodeClassTerminating" and controller.resolver.cleaned == []
    assert not classes.waiting("default")
    classes.observe(WatchEvent(4, EC2NODECLASS, DELETED, "default", _document(deleting=True)))
    asyncio.run(controller.reconcile("default"))
    assert controller.resolver.cleaned == [("default", "u-1")]
    assert [c[0] for c in controller.cluster.calls] == ["add"]  # never ours to remove


def test_a_terminating_class_is_not_resolved_again():
    """Upstream finalizes a class being deleted instead of reconciling it: no status written,
    no Ready recorded over its NodeClassTerminating."""
    controller, classes, patched, recorded = _harness(FOUND)
    classes.observe_claim(_claim("default-a"))
    _finalized(classes, controller)
    asyncio.run(controller.reconcile("default"))
    assert len(patched) == 1 and [e.reason for e in recorded] == ["Ready", "NodeClassTerminating"]


def _pool(kind: str, name: str = "default") -> dict[str, Any]:
    ref = {"group": "karpenter.k8s.aws", "kind": kind, "name": name}
    return {"spec": {"template": {"spec": {"nodeClassRef": ref}}}}


@pytest.mark.parametrize(
    ("pool", "cloud", "readiness", "present", "expected"),
    [
        (_pool("EC2NodeClass"), False, {}, set(), SIM_CLASS),
        (_pool("SimNodeClass"), True, {}, set(), SIM_CLASS),
        (_pool("EC2NodeClass"), True, {}, set(), NOT_FOUND),
        (_pool("EC2NodeClass"), True, {}, {"default"}, UNKNOWN),
        (
            _pool("EC2NodeClass"),
            True,
            {"default": (False, "UnhealthyDependents", "SubnetsReady=False")},
            {"default"},
            (False, "UnhealthyDependents", "SubnetsReady=False"),
        ),
        (_pool("EC2NodeClass"), True, {"default": (True, "Ready", "")}, {"default"}, (True, "Ready", "")),
    ],
)
def test_nodeclass_ready_follows_the_class(pool, cloud, readiness, present, expected):
    assert nodeclass_state(pool, cloud, readiness, present) == expected


def test_a_pool_on_a_class_not_ready_is_not_ready():
    written = {x["type"]: x for x in conditions(None, NOW, (), NOT_FOUND)}
    assert (written["NodeClassReady"]["status"], written["NodeClassReady"]["reason"]) == ("False", "NodeClassNotFound")
    assert written["NodeClassReady"]["message"] == "NodeClass not found on cluster"
    assert (written["Ready"]["status"], written["Ready"]["message"]) == ("False", "NodeClassReady=False")
