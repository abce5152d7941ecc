"""Preferred terms, ScheduleAnyway spread and BestEffort minValues: tried as requirements first,
given up one at a time when the pod cannot be placed (upstream's `Preferences.Relax`). The
cases follow the scenarios of upstream's scheduling suite ("Preferential Fallback", "Topology",
"MinValues"), told with this project's pools and catalog. Pods are made from PodPending facts,
so the spec's terms reach the pass as they do in the service."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.core import Requirement, Taint
from shared.api.labels import MIN_VALUES_RELAXED_ANNOTATION
from shared.events import contracts as c
from shared.kube.nodeclaims import ClaimRecord, annotations
from shared.scheduling.claims import claim_created
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.packing import schedule
from shared.scheduling.preferences import relax
from shared.scheduling.requirements import Requirements
from shared.scheduling.rules import MinValuesPolicy
from shared.scheduling.values import NodeCapacity, PendingPod, Plan, PoolTemplate
from shared.scheduling.view import pending_pod
from tests.factories import T0
from tests.unit.scheduling.oracle import shape

GI = Decimal(2**30)
ZONE, HOST, ARCH = "topology.kubernetes.io/zone", "kubernetes.io/hostname", "kubernetes.io/arch"
TYPE = "node.kubernetes.io/instance-type"


def instance(cpu: int, price: float, arch: str = "amd64") -> InstanceOption:
    resources = {"cpu": Decimal(cpu), "memory": cpu * GI, "pods": Decimal(110)}
    name = f"c{cpu}-{arch}"
    offers = tuple(Offer(z, "on-demand", price) for z in ("a", "b", "c"))
    return InstanceOption(name, resources, resources, {TYPE: name, ARCH: arch}, offers)


CATALOG = [instance(1, 1.0), instance(2, 2.0), instance(4, 4.0), instance(4, 4.4, "arm64")]


def spec_pod(name: str, cpu: str = "1", **spec: Any) -> PendingPod:
    fact = {"namespace": "default", "name": name, "uid": name, "requests": {"cpu": cpu, "memory": "1Gi"}, **spec}
    return pending_pod(c.PodPending.model_validate(fact), T0)


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def preferred_nodes(*terms: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    weighted = [{"weight": w, "preference": {"matchExpressions": m}} for w, m in terms]
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": weighted}}


def required_nodes(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    selector = {"nodeSelectorTerms": [{"matchExpressions": m} for m in terms]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}


def pool(name: str = "default", *values: str, **kw: Any) -> PoolTemplate:
    """A pool limited to the zones given (none: every zone)."""
    requirements = Requirements.of([Requirement(key=ZONE, operator="In", values=list(values))]) if values else None
    return PoolTemplate(name, requirements or Requirements(), **kw)


def node(name: str, zone: str, cpu: int = 4, **kw: Any) -> NodeCapacity:
    free = {"cpu": Decimal(cpu), "memory": cpu * GI, "pods": Decimal(110)}
    return NodeCapacity(name, {ZONE: zone, HOST: name}, [], free, **kw)


def zone_of(plan: Plan, key: str) -> str | None:
    for claim in plan.claims:
        if key in claim.pods:
            return claim.zones()[0] if len(claim.zones()) == 1 else ",".join(claim.zones())
    return None


NODE_AFFINITY_CASES = [
    # (what upstream's scenario says, the affinity, the pools' zones, the zone the claim ends in)
    ("a possible preference is honoured", preferred_nodes((1, [expr(ZONE, "In", "b")])), (), "b"),
    ("an impossible preference is relaxed", preferred_nodes((1, [expr(ZONE, "In", "z")])), ("a",), "a"),
    (
        "heavier preferences first: the heaviest possible one wins",
        preferred_nodes((1, [expr(ZONE, "In", "a")]), (50, [expr(ZONE, "In", "b")]), (100, [expr(ZONE, "In", "z")])),
        (),
        "b",
    ),
    (
        "relaxed down to the lightest when the heavier cannot be met",
        preferred_nodes((100, [expr(ZONE, "In", "z")]), (50, [expr(ZONE, "In", "y")]), (1, [expr(ZONE, "In", "a")])),
        (),
        "a",
    ),
    (
        "a preference that conflicts with the requirement is given up",
        {
            "nodeAffinity": {
                **required_nodes([expr(ZONE, "In", "a")])["nodeAffinity"],
                **preferred_nodes((1, [expr(ZONE, "In", "b")]))["nodeAffinity"],
            }
        },
        (),
        "a",
    ),
    (
        "required OR-terms are dropped one at a time, the first impossible",
        required_nodes([expr(ZONE, "In", "z")], [expr(ZONE, "In", "b")]),
        (),
        "b",
    ),
    (
        "a preferred arch is honoured",
        preferred_nodes((10, [expr(ARCH, "In", "arm64")])),
        (),
        "a,b,c",
    ),
]


@pytest.mark.parametrize(
    ("case", "affinity", "zones", "expected"), NODE_AFFINITY_CASES, ids=[c[0] for c in NODE_AFFINITY_CASES]
)
def test_node_affinity_preferences(case: str, affinity: dict[str, Any], zones: tuple[str, ...], expected: str):
    plan = schedule([spec_pod("p", affinity=affinity)], [], [pool("default", *zones)], CATALOG)
    assert not plan.unplaced, plan.unplaced
    assert zone_of(plan, "default/p") == expected
    if "arch" in case:
        assert plan.claims[0].instance_types == ["c4-arm64"]
    else:
        assert plan.claims[0].instance_types[0] == "c1-amd64"


def test_the_relaxation_order_is_upstreams():
    both = required_nodes([expr(ZONE, "In", "z")], [expr(ZONE, "In", "a")])
    both["nodeAffinity"].update(preferred_nodes((5, [expr(ZONE, "In", "b")]))["nodeAffinity"])
    term = {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "x"}}}
    both["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term}]}
    both["podAntiAffinity"] = {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term}]
    }
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}]
    pod = spec_pod("p", affinity=both, topology_spread_constraints=spread, labels={"app": "x"})
    pod = replace(pod, avoid_prefer_no_schedule=True)
    steps = []
    while (relaxed := relax(pod)) is not None:
        pod, why = relaxed
        steps.append(why.split("=")[0].rstrip())
    assert steps == [
        "removing: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]",
        "removing: spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]",
        "removing: spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]",
        "removing: spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]",
        "removing: spec.topologySpreadConstraints",
        "adding: toleration for PreferNoSchedule taints",
    ]
    assert pod.preferences is not None and not pod.topology.constrained and not pod.avoid_prefer_no_schedule


def anti(weight: int = 1, app: str = "web") -> dict[str, Any]:
    term = {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": app}}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "podAffinityTerm": term}]
        }
    }


ANTI_CASES = [
    # (case, existing nodes, the pool's node limit, nodes/claims the 3 pods end on)
    ("spread over three new claims", [], None, 3),
    ("spread over existing nodes with room", [node("n1", "a"), node("n2", "a"), node("n3", "b")], None, 3),
    ("relaxed onto one node when the pool may make no node", [node("n1", "a")], 0, 1),
    ("relaxed onto two when one more node is allowed", [node("n1", "a")], 1, 2),
]


@pytest.mark.parametrize(("case", "nodes", "limit", "hosts"), ANTI_CASES, ids=[c[0] for c in ANTI_CASES])
def test_preferred_anti_affinity_spreads_pods_then_relaxes(case: str, nodes: list, limit: int | None, hosts: int):
    pods = [spec_pod(f"w{i}", labels={"app": "web"}, affinity=anti()) for i in range(3)]
    remaining = None if limit is None else {"nodes": Decimal(limit)}
    plan = schedule(pods, nodes, [pool(remaining=remaining)], CATALOG)
    assert not plan.unplaced
    used = set(plan.placed.values()) | {claim.id for claim in plan.claims}
    assert len(used) == hosts


def test_preferred_zone_affinity_follows_the_pod_it_prefers_and_relaxes_when_it_cannot():
    term = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "db"}}}
    prefer = {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term}]}
    }
    running = [({"app": "db"}, "b", "db-node")]
    plan = schedule([spec_pod("p", affinity=prefer)], [], [pool()], CATALOG, running=running)
    assert zone_of(plan, "default/p") == "b"
    plan = schedule([spec_pod("p", affinity=prefer)], [], [pool("default", "a")], CATALOG, running=running)
    assert zone_of(plan, "default/p") == "a" and not plan.unplaced


SPREAD_CASES = [
    # (case, the pools' zones, zones of running matching pods, zones the 2 new pods go to)
    ("ScheduleAnyway honoured: the empty zones first", (), ["a"], {"b", "c"}),
    ("relaxed when only the crowded zone can launch", ("a",), ["a", "a"], {"a"}),
]


@pytest.mark.parametrize(("case", "zones", "crowd", "expected"), SPREAD_CASES, ids=[c[0] for c in SPREAD_CASES])
def test_schedule_anyway_spread(case: str, zones: tuple[str, ...], crowd: list[str], expected: set[str]):
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "s"}},
        }
    ]
    catalog = [instance(1, 1.0)]
    running = [({"app": "s"}, z, f"n-{i}") for i, z in enumerate(crowd)]
    pods = [spec_pod(f"s{i}", labels={"app": "s"}, topology_spread_constraints=spread) for i in range(2)]
    plan = schedule(pods, [], [pool("default", *zones)], catalog, running=running)
    assert not plan.unplaced, plan.unplaced
    assert {zone_of(plan, p.key) for p in pods} == expected


def test_prefer_no_schedule_is_avoided_first_then_tolerated():
    soft = (Taint(key="spare", effect="PreferNoSchedule"),)
    plan = schedule([spec_pod("p")], [], [pool("z-soft", taints=soft), pool("a-plain")], CATALOG)
    assert [claim.nodepool for claim in plan.claims] == ["a-plain"]  # z-soft comes first by name
    plan = schedule([spec_pod("p")], [], [pool("z-soft", taints=soft)], CATALOG)
    assert [claim.nodepool for claim in plan.claims] == ["z-soft"]


MIN_VALUES = [Requirement(key=TYPE, operator="Exists", min_values=5)]
MIN_CASES = [
    # (policy, placed, relaxed)
    (MinValuesPolicy.STRICT, False, None),
    (MinValuesPolicy.BEST_EFFORT, True, True),
]


@pytest.mark.parametrize(("policy", "placed", "relaxed"), MIN_CASES, ids=[str(p) for p, *_ in MIN_CASES])
def test_min_values_policy(policy: MinValuesPolicy, placed: bool, relaxed: bool | None):
    strict_pool = PoolTemplate("default", Requirements.of(MIN_VALUES))
    plan = schedule([spec_pod("p", "1.5")], [], [strict_pool], CATALOG, min_values_policy=policy)
    if not placed:
        assert "minValues" in plan.unplaced["default/p"] and not plan.claims
        return
    (claim,) = plan.claims
    assert claim.min_values_relaxed is relaxed
    assert claim.requirements[TYPE].min_values == 3  # the 3 types that hold 1.5 cpu
    assert len(claim.instance_types) == 3
    created = claim_created("default-1", claim)
    assert created.min_values_relaxed is True
    record = ClaimRecord("default-1", "default", T0, None, created.requirements, {}, min_values_relaxed=True)
    assert annotations(record)[MIN_VALUES_RELAXED_ANNOTATION] == "true"


def test_best_effort_keeps_a_met_min_values_and_says_it_was_not_relaxed():
    met = PoolTemplate("default", Requirements.of([Requirement(key=TYPE, operator="Exists", min_values=2)]))
    plan = schedule([spec_pod("p")], [], [met], CATALOG, min_values_policy=MinValuesPolicy.BEST_EFFORT)
    (claim,) = plan.claims
    assert not claim.min_values_relaxed and claim.requirements[TYPE].min_values == 2
    record = ClaimRecord("x", "default", T0, None, [], {}, min_values_relaxed=False)
    assert annotations(record)[MIN_VALUES_RELAXED_ANNOTATION] == "false"
    assert MIN_VALUES_RELAXED_ANNOTATION not in annotations(ClaimRecord("y", "default", T0, None, [], {}))


def test_the_min_values_policy_setting_refuses_other_values():
    from pydantic import ValidationError

    from shared.config import Settings

    assert Settings(min_values_policy="BestEffort").min_values_policy == "BestEffort"
    with pytest.raises(ValidationError, match="min_values_policy"):
        Settings(min_values_policy="Loose")


SOFT = st.sampled_from(
    [
        {},
        {"affinity": preferred_nodes((10, [expr(ZONE, "In", "z")]))},
        {"affinity": preferred_nodes((10, [expr(ZONE, "In", "b")]), (5, [expr(ARCH, "In", "arm64")]))},
        {"affinity": anti()},
        {
            "topology_spread_constraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": HOST,
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ]
        },
    ]
)


def _without_preferences(pod: PendingPod) -> PendingPod:
    """The pod with every soft term given up: what the required-only pass sees."""
    while (relaxed := relax(pod)) is not None:
        pod = relaxed[0]
    return replace(pod, preferences=None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["0.5", "1", "2", "3"]), SOFT), min_size=1, max_size=12),
    st.sampled_from([None, 1, 2, 4]),
)
def test_relaxing_never_leaves_unplaced_a_pod_the_required_only_pass_places(batch, nodes_left):
    """One pod at a time (so the batch's order cannot differ): a pod the required-only pass
    places is placed with its preferences too; and a pod with none plans the same either way."""
    remaining = None if nodes_left is None else {"nodes": Decimal(nodes_left)}
    existing = [node("n1", "a", 2, initialized=True)]
    for i, (cpu, soft) in enumerate(batch):
        pod = spec_pod(f"p{i}", cpu, labels={"app": "web"}, **soft)
        with_prefs = schedule([pod], existing, [pool(remaining=remaining)], CATALOG)
        required_only = schedule([_without_preferences(pod)], existing, [pool(remaining=remaining)], CATALOG)
        assert set(with_prefs.unplaced) <= set(required_only.unplaced)
        if not soft:
            assert shape(with_prefs) == shape(required_only)
