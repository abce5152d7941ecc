"""DaemonSet facts (reported once per resource version, deletions found by a re-list, rebuilt
from the log after a restart) and the affinity a PodBound carries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.sim.cluster import DaemonSet, Pod, PodTemplate
from services.sim.world import World
from services.watcher.facts import WATCHER_FACTS, Facts, fact_id
from shared.api.core import Toleration
from shared.api.pod import Affinity
from shared.api.quantity import parse
from shared.api.scenario import DEPLOYMENT, parse_scenario
from shared.ports.cluster import ADDED, DAEMONSET, DELETED, MODIFIED, POD, Snapshot, WatchEvent
from tests.factories import scenario_doc

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)
KEY = "kube-system/agent"
GPU_NODES = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
        }
    }
}
ANTI_WEB = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def agent_object(cpu: str = "100m", **kw) -> dict:
    template = PodTemplate(labels={"app": "agent"}, requests={"cpu": parse(cpu), "memory": parse("128Mi")}, **kw)
    return DaemonSet("kube-system", "agent", template).to_dict()


def ds(version: int, action: str = ADDED, cpu: str = "100m") -> WatchEvent:
    return WatchEvent(version, DAEMONSET, action, KEY, {} if action == DELETED else agent_object(cpu))


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([ds(5)], [("DaemonSetApplied", 5)]),
        ([ds(5), ds(5, MODIFIED)], [("DaemonSetApplied", 5)]),  # the same version seen twice (a re-list)
        ([ds(5), ds(9, MODIFIED, "200m")], [("DaemonSetApplied", 5), ("DaemonSetApplied", 9)]),
        ([ds(5), ds(7, DELETED)], [("DaemonSetApplied", 5), ("DaemonSetDeleted", 5)]),
        ([ds(7, DELETED)], []),  # never reported: nothing to take back
        (
            [ds(5), ds(7, DELETED), ds(8)],  # deleted and created again under the same name
            [("DaemonSetApplied", 5), ("DaemonSetDeleted", 5), ("DaemonSetApplied", 8)],
        ),
    ],
)
def test_daemonset_facts_one_per_version_with_ids_from_key_and_version(events, expected):
    facts = Facts()
    seen = [f for e in events for f in facts.observe(e)]
    assert [(f.event.TYPE, f.event.stream_id) for f in seen] == [(kind, f"daemonset-{KEY}") for kind, _ in expected]
    assert [f.event_id for f in seen] == [fact_id(kind, KEY, version) for kind, version in expected]
    applied = [f.event for f in seen if f.event.TYPE == "DaemonSetApplied"]
    assert [a.resource_version for a in applied] == [v for kind, v in expected if kind == "DaemonSetApplied"]


@pytest.mark.parametrize(
    ("template", "fields"),
    [
        (
            {},
            {"requests": {"cpu": "100m", "memory": "128Mi"}, "node_selector": {}, "affinity": None, "tolerations": []},
        ),
        (
            {
                "node_selector": {"gpu": "true"},
                "affinity": Affinity.model_validate(GPU_NODES),
                "tolerations": [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
            },
            {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "node_selector": {"gpu": "true"},
                "affinity": GPU_NODES,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        ),
    ],
)
def test_a_daemonset_applied_carries_its_pod_template(template, fields):
    (fact,) = Facts().observe(WatchEvent(3, DAEMONSET, ADDED, KEY, agent_object(**template)))
    event = fact.event
    assert (event.namespace, event.name, event.resource_version) == ("kube-system", "agent", 3)
    assert {name: getattr(event, name) for name in fields} == fields
    assert ("affinity" in event.payload()) == (fields["affinity"] is not None)


@pytest.mark.parametrize(
    ("listed", "expected"),
    [
        ([ds(5)], []),  # unchanged while the watcher was down
        ([ds(9, cpu="200m")], [("DaemonSetApplied", 9)]),
        ([], [("DaemonSetDeleted", 5)]),  # the list no longer shows it: deleted, whatever took it away
    ],
)
def test_a_restarted_watcher_reports_only_daemonset_differences(listed, expected):
    live = Facts()
    reported = live.observe(ds(5))
    restarted = Facts()
    restarted.remember(f.event for f in reported)
    again = restarted.resync(Snapshot(10, listed))
    assert [(f.event.TYPE, f.event_id) for f in again] == [(k, fact_id(k, KEY, v)) for k, v in expected]
    if not listed:  # the same id a watcher that never stopped would give the deletion
        assert [f.event_id for f in live.resync(Snapshot(10, []))] == [f.event_id for f in again]
    assert restarted.resync(Snapshot(10, listed)) == []


def pod_object(affinity: dict | None) -> dict:
    template = PodTemplate(
        labels={"app": "db"},
        requests={"cpu": parse("1")},
        affinity=Affinity.model_validate(affinity) if affinity else None,
    )
    pod = Pod("default", "db-0", template, DEPLOYMENT, "db", T0, node_name="n1", uid="uid-1")
    return pod.to_dict()


@pytest.mark.parametrize("affinity", [ANTI_WEB, GPU_NODES, None])
def test_a_pod_bound_carries_the_pods_affinity(affinity):
    (fact,) = Facts().observe(WatchEvent(4, POD, MODIFIED, "default/db-0", pod_object(affinity)))
    assert (fact.event.TYPE, fact.event.node, fact.event.affinity) == ("PodBound", "n1", affinity)
    assert ("affinity" in fact.event.payload()) == (affinity is not None)


def test_a_list_reports_daemonsets_before_pods_and_the_log_remembers_them():
    assert {"DaemonSetApplied", "DaemonSetDeleted"} <= set(WATCHER_FACTS)
    doc = scenario_doc(
        daemonSets=[{"name": "node-exporter", "requests": {"cpu": "100m"}}],
        workloads=[{"name": "web", "replicas": 2, "requests": {"cpu": "1"}}],
    )
    world = World(parse_scenario(doc))
    world.advance(world.now)
    facts = Facts().resync(world.cluster.snapshot())
    order = [f.event.TYPE for f in facts]
    assert order.index("DaemonSetApplied") < order.index("PodPending")
    restarted = Facts()
    restarted.remember(f.event for f in facts)
    assert restarted.daemonsets == {"default/node-exporter": next(e.resource_version for e in _applied(facts))}
    assert restarted.resync(world.cluster.snapshot()) == []


def _applied(facts):
    return [f.event for f in facts if f.event.TYPE == "DaemonSetApplied"]
