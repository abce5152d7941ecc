"""DaemonSets through the sim's change log and lists: recorded with resource versions like the
other kinds, so the watcher can report them to the scheduler."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from services.sim.cluster import DaemonSet, Node, NotFound, PodTemplate, SimCluster
from services.sim.world import World
from shared.api.core import Toleration
from shared.api.labels import HOSTNAME_LABEL
from shared.api.pod import Affinity
from shared.api.quantity import parse
from shared.api.scenario import parse_scenario
from shared.ports.cluster import ADDED, DAEMONSET, DELETED, MODIFIED
from tests.factories import scenario_doc

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)
GPU_NODES = Affinity.model_validate(
    {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
            }
        }
    }
)


def agent(cpu: str = "100m", **kw) -> DaemonSet:
    template = PodTemplate(labels={"app": "agent"}, requests={"cpu": parse(cpu), "memory": parse("128Mi")}, **kw)
    return DaemonSet("kube-system", "agent", template)


def node(name: str) -> Node:
    allocatable = {"cpu": Decimal(4), "memory": Decimal(16 * 2**30), "pods": Decimal(110)}
    return Node(name, f"sim:///{name}", {HOSTNAME_LABEL: name}, [], allocatable, allocatable, T0, True)


def ds_changes(cluster: SimCluster, after: int = 0) -> list[tuple[str, str]]:
    return [(c.action, c.key) for c in cluster.changes_since(after) if c.kind == DAEMONSET]


@pytest.mark.parametrize(
    ("applies", "expected"),
    [
        ([agent()], [ADDED]),
        ([agent(), agent()], [ADDED]),  # the same spec again: no new version
        ([agent(), agent("200m")], [ADDED, MODIFIED]),
        ([agent(), agent(node_selector={"gpu": "true"}), agent(node_selector={"gpu": "true"})], [ADDED, MODIFIED]),
    ],
)
def test_applying_a_daemonset_records_a_change_only_when_it_changes(applies, expected):
    cluster = SimCluster()
    for daemonset in applies:
        cluster.apply_daemonset(daemonset)
    assert ds_changes(cluster) == [(action, "kube-system/agent") for action in expected]


def test_a_daemonset_is_listed_at_its_last_version_with_its_pod_template():
    cluster = SimCluster()
    tolerate_all = Toleration(operator="Exists")
    cluster.apply_daemonset(agent(node_selector={"gpu": "true"}, affinity=GPU_NODES, tolerations=[tolerate_all]))
    cluster.add_node(node("n1"))
    cluster.apply_daemonset(
        agent("250m", node_selector={"gpu": "true"}, affinity=GPU_NODES, tolerations=[tolerate_all])
    )
    (listed,) = [o for o in cluster.snapshot().objects if o.kind == DAEMONSET]
    assert (listed.action, listed.key, listed.resource_version) == (ADDED, "kube-system/agent", 3)
    template = listed.object["template"]
    assert template["requests"] == {"cpu": "250m", "memory": "128Mi"}
    assert template["nodeSelector"] == {"gpu": "true"}
    assert template["affinity"] == GPU_NODES.to_dict()
    assert template["tolerations"] == [tolerate_all.to_dict()]
    assert (listed.object["namespace"], listed.object["name"]) == ("kube-system", "agent")


def test_deleting_a_daemonset_records_it_then_takes_its_pods():
    cluster = SimCluster()
    cluster.apply_daemonset(agent())
    cluster.add_node(node("n1"))
    cluster.reconcile(T0)
    cluster.schedule(T0)
    assert cluster.pods["kube-system/agent-n1"].node_name == "n1"
    version = cluster.resource_version
    cluster.delete_daemonset("kube-system", "agent")
    after = [(c.kind, c.action, c.key) for c in cluster.changes_since(version)]
    assert after == [(DAEMONSET, DELETED, "kube-system/agent"), ("Pod", DELETED, "kube-system/agent-n1")]
    assert not any(o.kind == DAEMONSET for o in cluster.snapshot().objects)
    cluster.reconcile(T0)
    assert cluster.pods == {}  # no controller left to bring its pod back
    with pytest.raises(NotFound):
        cluster.delete_daemonset("kube-system", "agent")


def test_a_scenarios_daemonsets_are_in_the_change_log_from_the_start():
    doc = scenario_doc(daemonSets=[{"name": "node-exporter", "requests": {"cpu": "100m"}}])
    world = World(parse_scenario(doc))
    (change,) = [c for c in world.cluster.changes_since(0) if c.kind == DAEMONSET]
    assert (change.action, change.key) == (ADDED, "default/node-exporter")
    assert change.object["template"]["requests"] == {"cpu": "100m"}
