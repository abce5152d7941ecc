"""The sim cluster and the world around it: binding, taints, selectors, affinity, spread,
evictions against PDBs, DaemonSets, controllers, and nodes that register then turn Ready."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from services.sim.cloud import InsufficientCapacity, LaunchRequest
from services.sim.cluster import (
    EvictionRefused,
    Node,
    NotFound,
    Pod,
    PodDisruptionBudget,
    PodTemplate,
    SimCluster,
    Workload,
)
from services.sim.world import World
from shared.api.core import Requirement, Taint, Toleration
from shared.api.labels import HOSTNAME_LABEL, ZONE_LABEL
from shared.api.pod import Affinity, LabelSelector
from shared.api.quantity import parse
from shared.api.scenario import DEPLOYMENT, STATEFULSET, parse_scenario
from tests.factories import nodepool_doc, scenario_doc

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)
ON_DEMAND_ONLY = Requirement(key="karpenter.sh/capacity-type", operator="In", values=["on-demand"])
GI = 2**30


def node(name: str, cpu: int = 4, zone: str = "zone-a", ready: bool = True, taints=(), **labels: str) -> Node:
    allocatable = {"cpu": Decimal(cpu), "memory": Decimal(cpu * 4 * GI), "pods": Decimal(110)}
    labels = {HOSTNAME_LABEL: name, ZONE_LABEL: zone, **labels}
    return Node(name, f"sim:///{name}", labels, list(taints), allocatable, allocatable, T0, ready)


def template(cpu: str = "1", app: str = "web", **kw) -> PodTemplate:
    return PodTemplate(labels={"app": app}, requests={"cpu": parse(cpu), "memory": Decimal(GI)}, **kw)


def pod(name: str, cpu: str = "1", app: str = "web", **kw) -> Pod:
    return Pod("default", name, template(cpu, app, **kw), DEPLOYMENT, app, T0)


def test_pending_pods_bind_where_they_fit_and_the_rest_are_unschedulable():
    cluster = SimCluster()
    cluster.add_node(node("n1", cpu=4))
    for i in range(5):
        cluster.add_pod(pod(f"p{i}", cpu="1"))
    bound = cluster.schedule(T0)
    assert len(bound) == 4  # 4 allocatable cpu, 1 per pod
    left = cluster.pending()
    assert len(left) == 1
    assert all(p.unschedulable == "0/1 nodes are available: 1 Insufficient cpu" for p in left)


def test_taints_selectors_and_not_ready_nodes_keep_pods_away():
    cluster = SimCluster()
    cluster.add_node(node("tainted", taints=[Taint(key="BackendOnly", effect="NoSchedule")]))
    cluster.add_node(node("starting", ready=False))
    cluster.add_node(node("gpu", accelerator="yes"))
    cluster.add_pod(pod("plain"))
    cluster.add_pod(pod("picky", node_selector={"accelerator": "yes"}))
    cluster.add_pod(
        pod(
            "backend",
            tolerations=[Toleration(key="BackendOnly", operator="Exists")],
            node_selector={HOSTNAME_LABEL: "tainted"},
        )
    )
    cluster.add_pod(pod("nowhere", node_selector={"accelerator": "no"}))
    cluster.schedule(T0)
    placed = {p.name: p.node_name for p in cluster.pods.values()}
    assert placed == {"plain": "gpu", "picky": "gpu", "backend": "tainted", "nowhere": None}
    message = cluster.pods["default/nowhere"].unschedulable
    assert "1 node(s) had untolerated taint {BackendOnly: }" in message
    assert "1 node(s) were not ready" in message and "1 node(s) didn't match Pod's node affinity/selector" in message


def test_required_node_affinity_hostname_anti_affinity_and_zone_spread():
    cluster = SimCluster()
    for name, zone in (("a1", "zone-a"), ("a2", "zone-a"), ("b1", "zone-b")):
        cluster.add_node(node(name, cpu=16, zone=zone))
    anti = Affinity.model_validate(
        {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME_LABEL}
                ]
            }
        }
    )
    for i in range(4):
        cluster.add_pod(pod(f"db{i}", app="db", affinity=anti))
    cluster.schedule(T0)
    hosts = [p.node_name for p in cluster.pods.values() if p.node_name]
    assert sorted(hosts) == ["a1", "a2", "b1"] and len(cluster.pending()) == 1
    assert "didn't match pod anti-affinity rules" in cluster.pending()[0].unschedulable

    spread = SimCluster()
    for name, zone in (("a1", "zone-a"), ("a2", "zone-a"), ("b1", "zone-b")):
        spread.add_node(node(name, cpu=16, zone=zone))
    from shared.api.pod import TopologySpreadConstraint

    constraint = TopologySpreadConstraint.model_validate(
        {
            "maxSkew": 1,
            "topologyKey": ZONE_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "api"}},
        }
    )
    in_a = Affinity.model_validate(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["zone-a", "zone-b"]}]}
                    ]
                }
            }
        }
    )
    for i in range(6):
        spread.add_pod(pod(f"api{i}", app="api", spread=[constraint], affinity=in_a))
    spread.schedule(T0)
    zones = [spread.nodes[p.node_name].labels[ZONE_LABEL] for p in spread.pods.values()]
    assert zones.count("zone-a") == zones.count("zone-b") == 3


def test_an_eviction_a_pdb_forbids_is_refused_like_the_api_429():
    cluster = SimCluster()
    cluster.add_node(node("n1", cpu=16))
    for i in range(3):
        cluster.add_pod(pod(f"web{i}"))
    cluster.schedule(T0)
    cluster.apply_pdb(
        PodDisruptionBudget("default", "web", LabelSelector(match_labels={"app": "web"}), min_available=2)
    )
    assert cluster.disruptions_allowed(cluster.pdbs["default/web"]) == 1
    cluster.evict("default/web0")
    with pytest.raises(EvictionRefused) as refused:
        cluster.evict("default/web1")
    assert refused.value.status == 429 and "default/web1" in str(refused.value)
    assert "default/web1" in cluster.pods
    cluster.apply_pdb(
        PodDisruptionBudget("default", "web", LabelSelector(match_labels={"app": "web"}), max_unavailable="50%")
    )
    cluster.evict("default/web1")  # 2 pods, 50% rounds up to 1 unavailable
    cluster.delete_pod("default/web2")  # a delete is not an eviction: no budget asked


def test_controllers_replace_lost_replicas_and_daemonsets_follow_nodes():
    cluster = SimCluster()
    cluster.apply_workload(Workload("default", "web", DEPLOYMENT, 3, template()))
    cluster.apply_workload(Workload("default", "db", STATEFULSET, 2, template(app="db")))
    from services.sim.cluster import DaemonSet

    cluster.apply_daemonset(DaemonSet("default", "agent", template("100m", "agent")))
    cluster.add_node(node("n1", cpu=16))
    cluster.add_node(node("n2", cpu=16, taints=[Taint(key="dedicated", effect="NoSchedule")]))
    cluster.reconcile(T0)
    cluster.schedule(T0)
    names = sorted(p.name for p in cluster.pods.values())
    assert "db-0" in names and "db-1" in names and "agent-n1" in names and "agent-n2" not in names
    assert cluster.pods["default/agent-n1"].node_name == "n1"
    lost = cluster.delete_node("n1")
    assert {p.name for p in lost} >= {"agent-n1", "db-0"}
    cluster.reconcile(T0 + timedelta(seconds=1))
    assert sum(p.owner_name == "web" for p in cluster.pods.values()) == 3
    assert "default/db-0" in cluster.pods and cluster.pods["default/db-0"].node_name is None
    cluster.workloads["default/web"].replicas = 1
    cluster.reconcile(T0 + timedelta(seconds=2))
    assert sum(p.owner_name == "web" for p in cluster.pods.values()) == 1
    kinds = [c.kind for c in cluster.changes_since(0)]
    assert kinds.count("Node") >= 3 and cluster.changes_since(cluster.resource_version) == []


SCENARIO = scenario_doc(
    seed=3,
    cloud={
        "instanceTypes": 120,
        "launchLatency": "30s",
        "registrationLatency": "20s",
        "insufficientCapacity": [{"capacityType": "spot", "from": "0s", "to": "10m"}],
        "interruptions": [{"at": "30m", "capacityType": "on-demand", "count": 1}],
    },
    workloads=[{"name": "web", "replicas": 2, "requests": {"cpu": "1"}}],
    timeline=[{"at": "5m", "scale": {"workload": "web", "replicas": 4}}],
)


def test_a_launched_node_registers_with_startup_taints_then_turns_ready_without_them():
    world = World(parse_scenario(SCENARIO))
    startup = Taint(key="node.cilium.io/agent-not-ready", effect="NoExecute")
    request = LaunchRequest(
        "c1",
        "default",
        [ON_DEMAND_ONLY],
        {"cpu": Decimal(2)},
        {"karpenter.sh/nodepool": "default"},
        [Taint(key="team", value="a", effect="NoSchedule")],
        [startup],
    )
    with pytest.raises(InsufficientCapacity):  # spot is short for the first ten minutes
        world.launch(
            LaunchRequest(
                "c0", "default", [Requirement(key="karpenter.sh/capacity-type", operator="In", values=["spot"])]
            )
        )
    instance = world.launch(request)
    assert instance.offering.capacity_type == "on-demand"
    world.advance(world.now + timedelta(seconds=29))
    assert world.cluster.nodes == {}
    world.advance(world.now + timedelta(seconds=1))
    registered = world.cluster.nodes["c1"]
    assert not registered.ready and {t.key for t in registered.taints} == {"team", startup.key}
    assert registered.labels["karpenter.sh/nodepool"] == "default" and registered.labels[HOSTNAME_LABEL] == "c1"
    world.advance(world.now + timedelta(seconds=20))
    assert registered.ready and [t.key for t in registered.taints] == ["team"]


def test_the_timeline_scales_and_interruptions_reclaim_after_the_notice():
    world = World(parse_scenario(SCENARIO))
    world.advance(world.now)
    assert len(world.cluster.pending()) == 2
    world.advance(world.scenario.instant("5m"))
    assert len(world.cluster.pending()) == 4
    instance = world.launch(LaunchRequest("c1", "default", [ON_DEMAND_ONLY]))
    world.advance(world.scenario.instant("30m"))
    assert instance.interrupted_at == world.scenario.instant("30m") and "c1" in world.cluster.nodes
    world.advance(world.scenario.instant("32m"))
    assert instance.state == "terminated" and "c1" not in world.cluster.nodes


def test_a_launch_asked_again_for_the_same_claim_returns_its_instance():
    world = World(parse_scenario(SCENARIO))
    first = world.launch(LaunchRequest("c1", "default", [ON_DEMAND_ONLY]))
    again = world.launch(LaunchRequest("c1", "default", [ON_DEMAND_ONLY]))
    other = world.launch(LaunchRequest("c2", "default", [ON_DEMAND_ONLY]))
    assert again is first and other is not first and len(world.cloud.instances) == 2
    world.advance(world.scenario.instant("32m"))  # reclaimed: a new launch for c1 is a new instance
    assert world.launch(LaunchRequest("c1", "default", [ON_DEMAND_ONLY])) is not first


def _affinity(kind: str, app: str, key: str = HOSTNAME_LABEL) -> Affinity:
    return Affinity.model_validate(
        {
            kind: {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
                ]
            }
        }
    )


def test_required_node_affinity_keeps_pods_in_the_zones_it_names():
    cluster = SimCluster()
    for name, zone in (("a1", "zone-a"), ("b1", "zone-b"), ("c1", "zone-c")):
        cluster.add_node(node(name, cpu=16, zone=zone))
    only_c = Affinity.model_validate(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["zone-c"]}]}
                    ]
                }
            }
        }
    )
    for i in range(3):
        cluster.add_pod(pod(f"p{i}", affinity=only_c))
    cluster.schedule(T0)
    assert {p.node_name for p in cluster.pods.values()} == {"c1"}


def test_a_placed_pods_anti_affinity_keeps_others_away_too():
    cluster = SimCluster()
    cluster.add_node(node("n1", cpu=16))
    cluster.add_node(node("n2", cpu=16))
    cluster.add_pod(pod("loner", app="loner", affinity=_affinity("podAntiAffinity", "web")))
    cluster.schedule(T0)
    lonely = cluster.pods["default/loner"].node_name
    for i in range(3):
        cluster.add_pod(pod(f"web{i}", app="web"))  # no terms of their own
    cluster.schedule(T0)
    assert {p.node_name for p in cluster.pods.values() if p.owner_name == "web"} == {"n1", "n2"} - {lonely}


def test_spread_counts_only_what_its_selector_matches():
    from shared.api.pod import TopologySpreadConstraint

    cluster = SimCluster()
    for name, zone in (("a1", "zone-a"), ("b1", "zone-b")):
        cluster.add_node(node(name, cpu=16, zone=zone))
    for i in range(3):  # other pods in zone-a: a constraint on app=api must not count them
        cluster.add_pod(pod(f"other{i}", app="other", node_selector={ZONE_LABEL: "zone-a"}))
    cluster.schedule(T0)

    def constraint(selector):
        return TopologySpreadConstraint.model_validate(
            {"maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule", **selector}
        )

    for i in range(4):
        cluster.add_pod(
            pod(f"api{i}", app="api", spread=[constraint({"labelSelector": {"matchLabels": {"app": "api"}}})])
        )
    cluster.add_pod(pod("free", app="x", spread=[constraint({})]))  # no selector: matches no pod, never skewed
    cluster.schedule(T0)
    zones = [cluster.nodes[p.node_name].labels[ZONE_LABEL] for p in cluster.pods.values() if p.owner_name == "api"]
    assert sorted(zones) == ["zone-a", "zone-a", "zone-b", "zone-b"]
    assert cluster.pods["default/free"].node_name is not None


def test_eviction_rules_for_unhealthy_pods_pending_pods_and_two_budgets():
    from services.sim.cluster import ClusterError

    cluster = SimCluster()
    cluster.add_node(node("n1", cpu=16))
    cluster.add_node(node("n2", cpu=16))
    for i in range(2):
        cluster.add_pod(pod(f"web{i}", node_selector={HOSTNAME_LABEL: f"n{i + 1}"}))
    cluster.add_pod(pod("stuck", node_selector={HOSTNAME_LABEL: "nowhere"}))
    cluster.schedule(T0)
    selector = LabelSelector(match_labels={"app": "web"})
    cluster.apply_pdb(PodDisruptionBudget("default", "web", selector, min_available=2))
    cluster.evict("default/stuck")  # pending: no budget asked
    cluster.set_ready("n2", False)  # web1 is now unhealthy, and the budget (2 healthy) is not met
    with pytest.raises(EvictionRefused):
        cluster.evict("default/web1")
    cluster.apply_pdb(PodDisruptionBudget("default", "web-too", selector, max_unavailable=1))
    with pytest.raises(ClusterError, match="more than one PodDisruptionBudget"):
        cluster.evict("default/web0")
    assert cluster.eviction_requests == {
        "default/stuck": {"200": 1},
        "default/web1": {"429": 1},
        "default/web0": {"500": 1},
    }


@pytest.mark.parametrize(
    ("asks", "answers", "evictions"),
    [
        (["web0"], {"web0": {"200": 1}}, 1),
        (["web0", "web0"], {"web0": {"200": 1, "404": 1}}, 1),  # asked again once gone: counted, not evicted
        (["web0", "web1", "web0", "web0"], {"web0": {"200": 1, "404": 2}, "web1": {"429": 1}}, 1),
        (["ghost"], {"ghost": {"404": 1}}, 0),  # never there
    ],
)
def test_every_eviction_request_is_counted_by_pod_and_answer(asks, answers, evictions):
    """A drain that asks again for a pod it already evicted shows in the count (a 404), which the
    eviction itself cannot show: the pod is gone either way."""
    cluster = SimCluster()
    cluster.add_node(node("n1", cpu=16))
    for i in range(2):
        cluster.add_pod(pod(f"web{i}"))
    cluster.schedule(T0)
    cluster.apply_pdb(
        PodDisruptionBudget("default", "web", LabelSelector(match_labels={"app": "web"}), min_available=1)
    )
    for name in asks:
        with contextlib.suppress(NotFound, EvictionRefused):
            cluster.evict(f"default/{name}")
    assert cluster.eviction_requests == {f"default/{name}": counts for name, counts in answers.items()}
    assert cluster.evictions == evictions


def test_a_daemonset_pod_binds_only_where_it_fits():
    from services.sim.cluster import DaemonSet

    cluster = SimCluster()
    cluster.add_node(node("small", cpu=1))
    cluster.add_node(node("big", cpu=8))
    cluster.apply_daemonset(DaemonSet("default", "agent", template("2", "agent")))
    cluster.reconcile(T0)
    cluster.schedule(T0)
    assert cluster.pods["default/agent-big"].node_name == "big"
    assert cluster.pods["default/agent-small"].node_name is None


def test_a_watch_older_than_the_kept_history_is_gone():
    from services.sim.cluster import Gone

    cluster = SimCluster()
    cluster.history = 10
    for i in range(25):
        cluster.add_pod(pod(f"p{i}"))
    assert cluster.changes_since(cluster.resource_version - 3) == cluster.changes[-3:]
    assert len(cluster.changes_since(cluster.resource_version - 8, limit=5)) == 5
    with pytest.raises(Gone):
        cluster.changes_since(0)


def test_a_world_whose_user_applies_the_nodepools_starts_without_them():
    scenario = parse_scenario({**SCENARIO, "spec": {**SCENARIO["spec"], "nodePools": [nodepool_doc()]}})
    assert set(World(scenario).cluster.nodepools) == {"team-a"}
    assert World(scenario, nodepools=False).cluster.nodepools == {}
