"""The indexed pass makes the plan the pass before it made (`oracle`), on generated batches
that mix what the index keys on: requirements, tolerations and taints, zone and hostname rules,
running pods, existing nodes, pools with limits and minValues; and on the benchmarks' shapes.
Also the bound: a pass that stops early defers the rest of its queue, in order (the pods it
ignores stay ignored)."""

from __future__ import annotations

from decimal import Decimal
from itertools import count
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.scheduling_shapes import catalog as benchmark_catalog
from benchmarks.scheduling_shapes import pods as benchmark_pods
from benchmarks.scheduling_shapes import thirds_catalog, thirds_pods
from shared.api.core import Requirement, Taint, Toleration
from shared.api.pod import PodAffinityTerm, TopologySpreadConstraint
from shared.scheduling import existing, packing
from shared.scheduling.offerings import DaemonSetPods, InstanceOption, Offer
from shared.scheduling.requirements import Requirements
from shared.scheduling.topology import PodTopology
from shared.scheduling.values import Bound, NodeCapacity, PendingPod, PoolTemplate
from tests.unit.scheduling.oracle import schedule, shape

GI = Decimal(2**30)
ZONE, HOST, ARCH = "topology.kubernetes.io/zone", "kubernetes.io/hostname", "kubernetes.io/arch"
ZONES = ("a", "b", "c")


def _instance(cpu: int, arch: str, pods: int, price: float) -> InstanceOption:
    resources = {"cpu": Decimal(cpu), "memory": cpu * 2 * GI, "pods": Decimal(pods)}
    labels = {"node.kubernetes.io/instance-type": f"t{cpu}-{arch}", ARCH: arch}
    offers = tuple(
        Offer(z, ct, price * (0.6 if ct == "spot" else 1.0))
        for z in ZONES
        for ct in ("spot", "on-demand")
        if z != "c" or cpu < 8
    )
    return InstanceOption(f"t{cpu}-{arch}", resources, resources, labels, offers)


CATALOG = [
    _instance(c, a, p, c * (1.1 if a == "arm64" else 1.0))
    for c, p in ((1, 3), (2, 4), (4, 8), (8, 12))
    for a in ("amd64", "arm64")
]
TAINT = Taint(key="dedicated", value="x", effect="NoSchedule")
TOLERATE = Toleration(key="dedicated", operator="Exists")


def _req(key: str, op: str, *values: str, min_values: int | None = None) -> Requirement:
    return Requirement(key=key, operator=op, values=list(values) or None, min_values=min_values)


def _rules(kind: str, app: str, skew: int) -> dict:
    selector = {"labelSelector": {"matchLabels": {"app": app}}}
    if kind in ("zone-spread", "host-spread"):
        key = ZONE if kind == "zone-spread" else HOST
        c = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", **selector}
        return {"spread": (TopologySpreadConstraint.model_validate(c),)}
    if kind == "zone-affinity":
        return {"affinity": (PodAffinityTerm.model_validate({"topologyKey": ZONE, **selector}),)}
    if kind == "host-anti":
        return {"anti_affinity": (PodAffinityTerm.model_validate({"topologyKey": HOST, **selector}),)}
    return {}


POD_REQUIREMENTS = {
    "none": [],
    "arm": [_req(ARCH, "In", "arm64")],
    "zone-a": [_req(ZONE, "In", "a")],
    "not-b": [_req(ZONE, "NotIn", "b")],
    "spot": [_req("karpenter.sh/capacity-type", "In", "spot")],
    "pool-p1": [_req("karpenter.sh/nodepool", "In", "p1")],
    "big": [_req("node.kubernetes.io/instance-type", "In", "t4-amd64", "t8-amd64", "t8-arm64")],
}


@st.composite
def batches(draw):
    pods = []
    for i in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["plain", "plain", "zone-spread", "host-spread", "zone-affinity", "host-anti"]))
        app = draw(st.sampled_from(["x", "y"])) + "-" + kind
        requirements = Requirements.of(POD_REQUIREMENTS[draw(st.sampled_from(sorted(POD_REQUIREMENTS)))])
        pods.append(
            PendingPod(
                f"p{i}",
                {
                    "cpu": Decimal(draw(st.sampled_from(["0.1", "0.25", "0.5", "1", "1.5", "3"]))),
                    "memory": GI * draw(st.sampled_from([0, 1, 2])),
                },
                requirements,
                (TOLERATE,) if draw(st.booleans()) else (),
                uid=f"{draw(st.integers(0, 9))}-{i}",
                daemonset=draw(st.integers(0, 20)) == 0,
                topology=PodTopology(labels={"app": app}, **_rules(kind, app, draw(st.integers(1, 2)))),
            )
        )
    nodes = [
        NodeCapacity(
            f"n{i}",
            {ZONE: draw(st.sampled_from(ZONES)), HOST: f"n{i}", ARCH: draw(st.sampled_from(["amd64", "arm64"]))},
            [TAINT] if draw(st.integers(0, 3)) == 0 else [],
            {
                "cpu": Decimal(draw(st.integers(0, 4))),
                "memory": draw(st.integers(0, 6)) * GI,
                "pods": Decimal(draw(st.integers(0, 4))),
            },
            initialized=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 12)))
    ]
    pools = []
    for name in draw(st.lists(st.sampled_from(["p1", "p2", "p3"]), min_size=1, max_size=3, unique=True)):
        requirements = draw(
            st.sampled_from(
                [
                    [],
                    [_req(ARCH, "In", "amd64")],
                    [_req(ZONE, "In", "a", "b")],
                    [_req("node.kubernetes.io/instance-type", "Exists", min_values=2)],
                ]
            )
        )
        limits = {"cpu": Decimal(draw(st.integers(0, 24))), "nodes": Decimal(draw(st.integers(0, 6)))}
        remaining = {k: v for k, v in limits.items() if draw(st.booleans())} or None
        taints = (TAINT,) if draw(st.integers(0, 3)) == 0 else ()
        pools.append(PoolTemplate(name, Requirements.of(requirements), draw(st.integers(0, 2)), taints, remaining))
    daemonsets = [DaemonSetPods({"cpu": Decimal("0.5")})] if draw(st.booleans()) else []
    running = [
        (
            {"app": draw(st.sampled_from(["x-host-anti", "y-zone-affinity", "x-zone-spread", "x-host-spread"]))},
            draw(st.sampled_from(ZONES)),
            f"n{i}",
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    return pods, nodes, pools, daemonsets, running


@settings(max_examples=300, deadline=None)
@given(batches(), st.booleans())
def test_the_indexed_pass_makes_the_plan_the_old_pass_made(case, trees_at_once):
    pods, nodes, pools, daemonsets, running = case
    with patch.object(existing, "SCAN_FIRST", 0 if trees_at_once else existing.SCAN_FIRST):  # both node paths
        schedule(pods, nodes, pools, CATALOG, daemonsets=daemonsets, running=running)  # compares itself


def _lopsided_thirds() -> tuple[list[PendingPod], list[InstanceOption]]:
    """Thirds whose largest cpu and largest memory are two types: a claim's room in each may
    pass the parked trees' test and still fit no type, so the full check must decide."""
    cpu_heavy = {"cpu": Decimal(4), "memory": 2 * GI, "pods": Decimal(8)}
    memory_heavy = {"cpu": Decimal(2), "memory": 8 * GI, "pods": Decimal(8)}
    types = [
        InstanceOption(name, room, room, {"node.kubernetes.io/instance-type": name}, (Offer("a", "on-demand", 1.0),))
        for name, room in (("cpu-heavy", cpu_heavy), ("memory-heavy", memory_heavy))
    ]
    sizes = [("1.5", 1), ("0.75", 3), ("0.75", 0), ("0.25", 2), ("0.25", 0)]
    pods = [
        PendingPod(f"p{i}-{j}", {"cpu": Decimal(cpu), "memory": gi * GI}, uid=f"{i}-{j:04d}")
        for i, (cpu, gi) in enumerate(sizes)
        for j in range(24)
    ]
    return pods, types


SHAPES = {  # name: (pods and catalog, the claims the plan makes)
    "karpenter": (lambda: (benchmark_pods(600, seed=7), benchmark_catalog()), 120),
    "thirds": (lambda: (thirds_pods(40), thirds_catalog()), 60),
    "lopsided thirds": (_lopsided_thirds, None),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_benchmarks_shapes_make_the_same_plan(name):
    build, claims = SHAPES[name]
    pods, types = build()
    plan = schedule(pods, [], [PoolTemplate("default", Requirements())], types)
    assert not plan.unplaced and (claims is None or len(plan.claims) == claims)


SMALL = [  # two types too small for the batch: claims fill, and searches pass over full ones
    InstanceOption(name, room, room, {"node.kubernetes.io/instance-type": name}, (Offer("a", "on-demand", price),))
    for name, room, price in (
        ("two", {"cpu": Decimal(2), "memory": 8 * GI, "pods": Decimal(110)}, 1.0),
        ("four-lean", {"cpu": Decimal(4), "memory": 2 * GI, "pods": Decimal(6)}, 1.5),
    )
]


@st.composite
def dense_batches(draw):
    """Pods of a few sizes on types too small for them, some with hostname rules: claims fill
    up and are parked, and hostname rules keep some pods off some of them."""
    pods = []
    for i in range(draw(st.integers(0, 40))):
        cpu = draw(st.sampled_from(["1.5", "1", "0.75", "0.5", "0.25"]))
        kind = draw(st.sampled_from(["plain", "plain", "host-spread", "host-anti"]))
        app = draw(st.sampled_from(["x", "y"])) + "-" + kind
        topology = PodTopology(labels={"app": app}, **_rules(kind, app, draw(st.integers(1, 3))))
        memory = GI * draw(st.sampled_from([0, 1, 2, 4, 6]))
        pods.append(PendingPod(f"p{i}", {"cpu": Decimal(cpu), "memory": memory}, uid=f"{i:04d}", topology=topology))
    return pods, SMALL[: draw(st.integers(1, 2))]


@settings(max_examples=200, deadline=None)
@given(dense_batches())
def test_dense_batches_on_small_types_make_the_same_plan(case):
    pods, types = case
    schedule(pods, [], [PoolTemplate("default", Requirements())], types)  # compares itself


def test_a_pool_under_limits_builds_a_list_per_claim_and_still_plans_alike():
    limited = PoolTemplate("default", Requirements(), remaining={"cpu": Decimal(10_000), "nodes": Decimal(500)})
    schedule(benchmark_pods(400, seed=3), [], [limited], benchmark_catalog())


@settings(max_examples=100, deadline=None)
@given(batches(), st.integers(0, 45))
def test_a_pass_bounded_after_n_pods_plans_those_and_defers_the_rest_in_order(case, n):
    pods, nodes, pools, daemonsets, running = case
    bounded = packing.schedule(pods, nodes, pools, CATALOG, daemonsets=daemonsets, running=running, bound=Bound(pods=n))
    queue = sorted(pods, key=packing._queue_order)
    taken = max(n, 1)  # a pass always looks at its first pod, so the queue moves
    rest = queue[taken:]
    left_alone = [p for p in rest if packing._left_alone(p)]  # ignored, bound or not
    assert bounded.deferred == [p.key for p in rest if p not in left_alone]
    assert bounded.timed_out == (len(left_alone) < len(rest))
    first = packing.schedule(queue[:taken] + left_alone, nodes, pools, CATALOG, daemonsets=daemonsets, running=running)
    assert shape(bounded) == shape(first)


def test_a_deadline_on_the_callers_clock_stops_the_pass():
    ticks = count()
    pods = benchmark_pods(50)
    plan = packing.schedule(
        pods,
        [],
        [PoolTemplate("default", Requirements())],
        CATALOG,
        bound=Bound(deadline=10, clock=lambda: next(ticks)),
    )
    assert len(plan.deferred) == 39 and plan.timed_out  # asked from the 2nd pod on: 10 reached before the 12th
    unbounded = packing.schedule(pods, [], [PoolTemplate("default", Requirements())], CATALOG, bound=Bound(deadline=10))
    assert not unbounded.deferred  # a deadline without a clock never stops it
    spent = packing.schedule(
        pods, [], [PoolTemplate("default", Requirements())], CATALOG, bound=Bound(deadline=0, clock=lambda: 1)
    )
    assert len(spent.deferred) == 49  # a bound over before the first pod still places one
