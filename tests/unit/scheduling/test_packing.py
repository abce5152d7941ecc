"""A scheduling pass: upstream's provisioning cases (`pkg/controllers/provisioning/scheduling/`), and the invariants that no
plan passes a limit or puts a pod where it does not fit. `schedule` is the equivalence check
(`oracle`): each case also runs the oracle baseline and expects the same plan."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.core import Requirement, Taint, Toleration
from shared.scheduling.offerings import DaemonSetPods, InstanceOption, Offer
from shared.scheduling.packing import claim_requirements
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import NodeCapacity, PendingPod, PoolTemplate
from tests.unit.scheduling.oracle import schedule

GI = Decimal(2**30)


def instance(cpu: str, memory_gi: int, price: float, arch: str = "amd64") -> InstanceOption:
    resources = {"cpu": Decimal(cpu), "memory": memory_gi * GI, "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": f"c{cpu}", "kubernetes.io/arch": arch}
    offers = (Offer("a", "on-demand", price), Offer("b", "on-demand", price))
    return InstanceOption(f"c{cpu}-{arch}", resources, resources, labels, offers)


CATALOG = [instance("1", 1, 1.0), instance("2", 2, 2.0), instance("4", 4, 4.0), instance("8", 8, 8.0)]


def pod(name: str, cpu: str = "1", memory_gi: str = "1", **kw) -> PendingPod:
    return PendingPod(name, {"cpu": Decimal(cpu), "memory": Decimal(memory_gi) * GI}, **kw)


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement(key=key, operator=op, values=list(values) or None)


def pool(name: str, weight: int = 0, **kw) -> PoolTemplate:
    return PoolTemplate(name, Requirements(), weight, **kw)


def test_pools_by_weight_then_name_descending():
    plan = schedule([pod("p")], [], [pool("a"), pool("c"), pool("b", weight=0)], CATALOG)
    assert [c.nodepool for c in plan.claims] == ["c"]
    plan = schedule([pod("p")], [], [pool("a", weight=10), pool("c")], CATALOG)
    assert [c.nodepool for c in plan.claims] == ["a"]


def test_a_taint_blocks_a_pool_and_a_startup_taint_does_not():
    tainted = pool("z-tainted", taints=(Taint(key="dedicated", effect="NoSchedule"),))
    plan = schedule([pod("p")], [], [tainted, pool("a-plain")], CATALOG)
    assert [c.nodepool for c in plan.claims] == ["a-plain"]
    tolerant = pod("q", tolerations=(Toleration(key="dedicated", operator="Exists"),))
    assert [c.nodepool for c in schedule([tolerant], [], [tainted, pool("a-plain")], CATALOG).claims] == ["z-tainted"]
    # a pod that does not tolerate the pool's taint never joins a claim of that pool
    plan = schedule([tolerant, pod("r", "0.5")], [], [tainted], CATALOG)
    assert [c.pods for c in plan.claims] == [["q"]] and "r" in plan.unplaced
    # a node still starting is given without its startup taints: they never block a pod
    starting = NodeCapacity("n1", {}, [], {"cpu": Decimal(4), "memory": 4 * GI, "pods": Decimal(10)}, initialized=False)
    assert schedule([pod("s")], [starting], [pool("a-plain")], CATALOG).placed == {"s": "n1"}


def test_daemonset_overhead_picks_the_4_cpu_type_for_a_1_cpu_pod_beside_a_2_cpu_daemonset():
    ds = DaemonSetPods({"cpu": Decimal(2), "memory": 2 * GI}, (Toleration(operator="Exists"),))
    plan = schedule([pod("p", "1", "1")], [], [pool("default")], CATALOG, daemonsets=[ds])
    (claim,) = plan.claims
    assert claim.instance_types[0] == "c4-amd64"


def test_cpu_limit_2_leaves_the_second_of_two_1_75_cpu_pods_pending():
    catalog = [instance("2", 4, 2.0)]
    limited = pool("default", remaining={"cpu": Decimal(2)})
    plan = schedule([pod("p1", "1.75"), pod("p2", "1.75")], [], [limited], catalog)
    assert len(plan.claims) == 1 and list(plan.unplaced) == ["p2"]
    assert "exceed limits" in plan.unplaced["p2"]


def test_every_new_claim_takes_one_of_the_nodes_limit_within_the_pass():
    limited = pool("default", remaining={"nodes": Decimal(2)})
    pods = [pod(f"p{i}", "6") for i in range(3)]  # one 8-cpu node holds only one of them
    plan = schedule(pods, [], [limited], CATALOG)
    assert len(plan.claims) == 2 and list(plan.unplaced) == ["p2"]
    assert "node limits have been exhausted" in plan.unplaced["p2"]


def test_a_pod_avoiding_every_nodepool_and_daemonset_pods_are_ignored():
    avoid = pod("outsider", requirements=Requirements.of([req("karpenter.sh/nodepool", "DoesNotExist")]))
    plan = schedule([avoid, pod("ds", daemonset=True)], [], [pool("default")], CATALOG)
    assert plan.claims == [] and plan.unplaced == {} and sorted(plan.ignored) == ["ds", "outsider"]


def test_existing_capacity_first_then_claims_of_this_pass_then_new_claims():
    node = NodeCapacity(
        "n1", {"kubernetes.io/arch": "amd64"}, [], {"cpu": Decimal(1), "memory": 4 * GI, "pods": Decimal(10)}
    )
    pods = [pod("big", "3"), pod("small", "1"), pod("tiny", "0.5")]
    plan = schedule(pods, [node], [pool("default")], CATALOG)
    assert plan.placed == {"small": "n1"}  # 1 cpu free: the 1-cpu pod, first fit decreasing
    (claim,) = plan.claims
    assert claim.pods == ["big", "tiny"] and claim.instance_types[0] == "c4-amd64"


def test_requirements_narrow_the_types_and_a_pool_label_the_pod_asks_for():
    catalog = [*CATALOG, instance("4", 4, 3.0, arch="arm64")]
    arm = pod("arm", requirements=Requirements.of([req("kubernetes.io/arch", "In", "arm64")]))
    plan = schedule([arm], [], [pool("default")], catalog)
    assert plan.claims[0].instance_types == ["c4-arm64"]
    wants_b = pod("b", requirements=Requirements.of([req("karpenter.sh/nodepool", "In", "b")]))
    assert [c.nodepool for c in schedule([wants_b], [], [pool("a", 5), pool("b")], CATALOG).claims] == ["b"]
    custom = pod("c", requirements=Requirements.of([req("team", "In", "x")]))
    plan = schedule([custom], [], [pool("a")], CATALOG)
    assert 'label "team" does not have known values' in plan.unplaced["c"]
    final = claim_requirements(schedule([arm], [], [pool("default")], catalog).claims[0])
    assert final["node.kubernetes.io/instance-type"].values == {"c4-arm64"} and final["karpenter.sh/nodepool"].has(
        "default"
    )


@st.composite
def passes(draw):
    pods = [
        pod(
            f"p{i}",
            draw(st.sampled_from(["0.25", "0.5", "1", "1.5", "3", "7"])),
            draw(st.sampled_from(["1", "2", "4"])),
        )
        for i in range(draw(st.integers(0, 25)))
    ]
    nodes = [
        NodeCapacity(f"n{i}", {}, [], {"cpu": Decimal(draw(st.integers(0, 4))), "memory": 4 * GI, "pods": Decimal(3)})
        for i in range(draw(st.integers(0, 3)))
    ]
    limits = {
        "cpu": Decimal(draw(st.integers(0, 20))),
        "memory": draw(st.integers(0, 20)) * GI,
        "nodes": Decimal(draw(st.integers(0, 5))),
    }
    remaining = {k: v for k, v in limits.items() if draw(st.booleans())}
    return pods, nodes, remaining


@settings(max_examples=200, deadline=None)
@given(passes())
def test_no_plan_passes_a_limit_or_puts_a_pod_where_it_does_not_fit(case):
    pods, nodes, remaining = case
    plan = schedule(pods, nodes, [pool("default", remaining=remaining or None)], CATALOG)
    by_key = {p.key: p for p in pods}
    assert set(plan.placed) | {k for c in plan.claims for k in c.pods} | set(plan.unplaced) == set(by_key)
    for node in nodes:
        on_it = [by_key[k] for k, n in plan.placed.items() if n == node.name]
        assert sum((p.requests["cpu"] for p in on_it), Decimal(0)) <= node.free["cpu"]
        assert len(on_it) <= node.free["pods"]
    for claim in plan.claims:
        cpu = sum((by_key[k].requests["cpu"] for k in claim.pods), Decimal(0))
        memory = sum((by_key[k].requests["memory"] for k in claim.pods), Decimal(0))
        assert claim.options and all(o.room["cpu"] >= cpu and o.room["memory"] >= memory for o in claim.options)
    if remaining:
        assert len(plan.claims) <= remaining.get("nodes", len(plan.claims))
        for resource in ("cpu", "memory"):
            if resource in remaining:
                worst = sum((max(o.instance.capacity[resource] for o in c.options) for c in plan.claims), Decimal(0))
                assert worst <= remaining[resource]


def _selector(app: str) -> dict:
    return {"labelSelector": {"matchLabels": {"app": app}}}


def spread(key: str, app: str, skew: int = 1):
    from shared.api.pod import TopologySpreadConstraint

    return TopologySpreadConstraint.model_validate(
        {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", **_selector(app)}
    )


def term(key: str, app: str):
    from shared.api.pod import PodAffinityTerm

    return PodAffinityTerm.model_validate({"topologyKey": key, **_selector(app)})


def topo_pod(name: str, app: str, **rules) -> PendingPod:
    from shared.scheduling.topology import PodTopology

    return pod(name, "1", "1", topology=PodTopology(labels={"app": app}, **rules))


ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"


def zone_of(claim) -> str:
    (zone,) = claim.requirements[ZONE].values
    return zone


def test_zone_spread_balances_claims_across_zones():
    pods = [topo_pod(f"p{i}", "web", spread=(spread(ZONE, "web"),)) for i in range(4)]
    plan = schedule(pods, [], [pool("default")], CATALOG)
    zones = sorted(zone_of(c) for c in plan.claims for _ in c.pods)
    assert zones == ["a", "a", "b", "b"]


def test_hostname_spread_and_anti_affinity_put_one_pod_per_node():
    spread_pods = [topo_pod(f"s{i}", "s", spread=(spread(HOST, "s"),)) for i in range(3)]
    assert len(schedule(spread_pods, [], [pool("default")], CATALOG).claims) == 3
    anti = [topo_pod(f"a{i}", "a", anti_affinity=(term(HOST, "a"),)) for i in range(3)]
    assert len(schedule(anti, [], [pool("default")], CATALOG).claims) == 3


def test_nodes_limit_2_with_three_anti_affine_pods_leaves_the_third_pending():
    anti = [topo_pod(f"a{i}", "a", anti_affinity=(term(HOST, "a"),)) for i in range(3)]
    plan = schedule(anti, [], [pool("default", remaining={"nodes": Decimal(2)})], CATALOG)
    assert len(plan.claims) == 2 and len(plan.unplaced) == 1


def test_zone_self_affinity_keeps_a_group_in_one_zone_and_follows_running_pods():
    group = [topo_pod(f"g{i}", "g", affinity=(term(ZONE, "g"),)) for i in range(5)]
    plan = schedule(group, [], [pool("default")], CATALOG)
    assert {zone_of(c) for c in plan.claims} == {"a"} and not plan.unplaced
    follower = [topo_pod("f", "f", affinity=(term(ZONE, "db"),))]
    plan = schedule(follower, [], [pool("default")], CATALOG, running=[({"app": "db"}, "b", "elsewhere")])
    assert [zone_of(c) for c in plan.claims] == ["b"]
    alone = schedule(follower, [], [pool("default")], CATALOG)
    assert "f" in alone.unplaced  # it wants db's zone and there is no db anywhere


def test_an_existing_node_in_a_zone_the_spread_forbids_is_passed_over():
    node = NodeCapacity("n1", {ZONE: "a", HOST: "n1"}, [], {"cpu": Decimal(8), "memory": 8 * GI, "pods": Decimal(10)})
    running = [({"app": "web"}, "a", "n1")]
    plan = schedule(
        [topo_pod("p", "web", spread=(spread(ZONE, "web"),))], [node], [pool("default")], CATALOG, running=running
    )
    assert plan.placed == {} and [zone_of(c) for c in plan.claims] == ["b"]


def test_a_running_pods_own_anti_affinity_keeps_the_pods_it_selects_off_its_node():
    node = NodeCapacity("n1", {ZONE: "a", HOST: "n1"}, [], {"cpu": Decimal(8), "memory": 8 * GI, "pods": Decimal(10)})
    web = [topo_pod("p", "web")]
    shy = ({"app": "db"}, "a", "n1", (term(HOST, "web"),))  # db runs on n1 and wants no web pod beside it
    assert schedule(web, [node], [pool("default")], CATALOG, running=[shy]).placed == {}
    assert schedule(web, [node], [pool("default")], CATALOG, running=[shy[:3]]).placed == {"p": "n1"}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["spread", "anti", "plain"]), max_size=20), st.integers(1, 2))
def test_placements_keep_hostname_anti_affinity_and_zone_skew(kinds, skew):
    pods = []
    for i, kind in enumerate(kinds):
        if kind == "spread":
            pods.append(topo_pod(f"s{i}", "s", spread=(spread(ZONE, "s", skew),)))
        elif kind == "anti":
            pods.append(topo_pod(f"a{i}", "a", anti_affinity=(term(HOST, "a"),)))
        else:
            pods.append(topo_pod(f"p{i}", "p"))
    plan = schedule(pods, [], [pool("default")], CATALOG)
    assert not plan.unplaced
    for claim in plan.claims:
        assert sum(1 for k in claim.pods if k.startswith("a")) <= 1
    counts = {"a": 0, "b": 0}
    for claim in plan.claims:
        for key in claim.pods:
            if key.startswith("s"):
                counts[zone_of(claim)] += 1
    assert abs(counts["a"] - counts["b"]) <= skew


def test_min_values_is_strict():
    catalog = [instance("2", 2, 2.0), instance("4", 4, 4.0), instance("8", 8, 8.0)]
    two_types = PoolTemplate(
        "default",
        Requirements.of([Requirement(key="node.kubernetes.io/instance-type", operator="Exists", min_values=2)]),
    )
    plan = schedule([pod("small", "1")], [], [two_types], catalog)
    assert len(plan.claims[0].instance_types) == 3  # c2, c4 and c8 all hold it: 3 >= 2
    plan = schedule([pod("big", "7")], [], [two_types], catalog)  # only c8 holds 7 cpu
    assert plan.claims == [] and "minValues" in plan.unplaced["big"]
    plan = schedule([pod("a", "3"), pod("b", "3")], [], [two_types], catalog)
    assert [c.pods for c in plan.claims] == [["a"], ["b"]]  # together only c8 would hold them: a claim each


def test_truncating_to_60_types_keeps_min_values():
    cheap = [instance(str(n), 8, 1.0 + n / 1000) for n in range(2, 82)]  # 80 types, family by label below
    catalog = [
        InstanceOption(o.name, o.capacity, o.allocatable, {**o.labels, "family": "c" if i < 70 else "m"}, o.offers)
        for i, o in enumerate(cheap)
    ]
    two_families = PoolTemplate(
        "default", Requirements.of([Requirement(key="family", operator="Exists", min_values=2)])
    )
    (claim,) = schedule([pod("p", "1")], [], [two_families], catalog).claims
    assert len(claim.instance_types) > 60 and {o.instance.labels["family"] for o in claim.options} == {"c", "m"}
