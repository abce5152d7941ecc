"""The pure parts of the what-if: replica counts from pod births and deaths, the changes to the
NodePools, the figures of a log, and the tolerances the baseline is held to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import pytest

from shared.whatif.changes import ChangeError, changed
from shared.whatif.compare import TOLERANCES, difference, fidelity
from shared.whatif.demand import DemandError, demand_of, replicas
from shared.whatif.figures import UNPLACED, Figures, figures

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class E(NamedTuple):
    type: str
    data: dict[str, Any]
    occurred_at: datetime


@pytest.mark.parametrize(
    ("births", "deaths", "expected"),
    [
        ([0, 0, 0], [], [(0, 3)]),
        ([0, 0], [100], [(0, 2), (100, 1)]),  # a death nobody replaces: a scale down
        ([0, 0, 130], [100], [(0, 2)]),  # replaced within SETTLE: an eviction, no change
        ([0, 0, 200], [100], [(0, 2), (100, 1), (200, 2)]),  # replaced too late: down, then up
        ([0, 50, 60], [], [(0, 1), (50, 2), (60, 3)]),
        ([], [], []),
    ],
)
def test_replicas_from_births_and_deaths(births, deaths, expected):
    got = replicas([at(s) for s in births], [at(s) for s in deaths])
    assert got == [(at(s), n) for s, n in expected]


def pool(name: str, nodes: str = "5", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "d"},
                    "requirements": [],
                }
            },
            "limits": {"nodes": nodes},
            **spec,
        },
    }


def document() -> dict[str, Any]:
    return {
        "spec": {
            "nodePools": [pool("web"), pool("batch")],
            "timeline": [{"at": "60s", "applyNodePool": pool("web", "3")}, {"at": "90s", "deleteNodePool": "batch"}],
        }
    }


def test_a_changed_pool_stands_for_every_application_of_it():
    out = changed(document(), [("web.yaml", pool("web", "12"))], [])
    assert [p["spec"]["limits"]["nodes"] for p in out["spec"]["nodePools"]] == ["12", "5"]
    assert out["spec"]["timeline"] == [{"at": "90s", "deleteNodePool": "batch"}]


def test_an_added_pool_and_a_dropped_one():
    out = changed(document(), [("new.yaml", pool("spare"))], ["batch"])
    assert [p["metadata"]["name"] for p in out["spec"]["nodePools"]] == ["web", "spare"]
    assert [e.get("deleteNodePool") for e in out["spec"]["timeline"]] == [None]


@pytest.mark.parametrize(
    ("pools", "drop", "message"),
    [
        ([], ["nope"], "--drop nope: no NodePool of that name"),
        ([("web.yaml", pool("web"))], ["web"], "also given with --nodepool"),
        (
            [("bad.yaml", pool("web", disruption={"budgets": [{"nodes": "lots"}]}))],
            [],
            "bad.yaml: NodePool web is not valid: spec.disruption.budgets",
        ),
        ([("bad.yaml", {"kind": "NodePool", "metadata": {"name": "x"}})], [], "bad.yaml: NodePool x is not valid"),
    ],
)
def test_bad_changes_name_the_field(pools, drop, message):
    with pytest.raises(ChangeError, match=message.replace(".", r"\.").replace("-", r"\-")):
        changed(document(), pools, drop)


def claim(kind: str, seconds: float, name: str, pool_: str = "web", **data: Any) -> E:
    return E(kind, {"nodeclaim": name, "nodepool": pool_, **data}, at(seconds))


def test_figures_of_a_log():
    option = [{"name": "c5.xlarge", "capacity": {"cpu": "4"}, "price": 0.2}]
    log = [
        claim("NodeClaimCreated", 0, "a", instance_types=option),
        claim("NodeClaimLaunched", 0, "a", instance_type="c5.xlarge", capacity={}, provider_id="p"),
        claim("NodeClaimCreated", 0, "b", instance_types=option),
        claim("NodeClaimLaunched", 0, "b", instance_type="c5.xlarge", capacity={}, provider_id="q"),
        E("NodeRegistered", {"node": "a", "nodepool": "web", "provider_id": "p"}, at(30)),
        E("PodPending", {"namespace": "default", "name": "p1"}, at(0)),
        E("PodPending", {"namespace": "default", "name": "p2"}, at(0)),
        E("PodBound", {"namespace": "default", "name": "p1", "node": "a"}, at(60)),
        E("DisruptionBlocked", {"nodepool": "web", "reason": "Empty", "cause": "NodeHardLimit"}, at(100)),
        claim("NodeClaimDeletionRequested", 1800, "a", reason="Empty", decision_id="d"),
        claim("NodeClaimTerminated", 1800, "a"),
        claim("NodeClaimTerminated", 3000, "b"),  # not asked for: the cloud took it
    ]
    got = figures(log, T0, at(3600))
    web = got["web"]
    assert web.node_hours == pytest.approx(0.5 + 3000 / 3600)
    assert web.cost == pytest.approx(0.2 * (0.5 + 3000 / 3600))
    assert (web.peak_nodes, web.launches, web.lost, web.limit_hits) == (2, 2, 1, 1)
    assert web.disruptions == {"Empty": 1}
    assert web.blocked == {"NodeHardLimit": 1}
    assert web.pending_pod_minutes == pytest.approx(1.0)
    assert got[UNPLACED].pending_pod_minutes == pytest.approx(60.0)  # p2 never bound
    assert got[UNPLACED].longest_wait_minutes == pytest.approx(60.0)


def test_a_window_counts_only_what_falls_inside_it():
    log = [
        claim("NodeClaimCreated", 0, "a", instance_types=[{"name": "t", "capacity": {}, "price": 1.0}]),
        claim("NodeClaimLaunched", 0, "a", instance_type="t", capacity={}, provider_id="p"),
    ]
    got = figures(log, at(1800), at(3600))
    assert got["web"].node_hours == pytest.approx(0.5)
    assert got["web"].launches == 0


@pytest.mark.parametrize(
    ("figure", "recorded", "replayed", "within"),
    [
        ("node_hours", 10.0, 11.4, True),
        ("node_hours", 10.0, 11.6, False),
        ("node_hours", 0.5, 1.4, True),  # the absolute floor
        ("peak_nodes", 8, 9, True),
        ("peak_nodes", 8, 10, False),
        ("disruptions", 4, 5, True),
        ("disruptions", 8, 11, False),
    ],
)
def test_tolerances(figure, recorded, replayed, within):
    assert TOLERANCES[figure].holds(recorded, replayed) is within


def test_fidelity_names_the_figure_beyond_its_tolerance():
    recorded = {"web": Figures(node_hours=10, peak_nodes=4, disruptions={"Empty": 2})}
    replayed = {"web": Figures(node_hours=10.5, peak_nodes=7, disruptions={"Empty": 2})}
    out = fidelity(recorded, replayed)
    assert not out["faithful"]
    assert len(out["beyond"]) == 1 and out["beyond"][0].startswith("web peak_nodes: recorded 4, replayed 7")
    assert out["pools"]["web"]["node_hours"]["within"]


def test_difference_per_pool_and_reason():
    base = {"web": Figures(node_hours=2, disruptions={"Empty": 3})}
    after = {"web": Figures(node_hours=3, disruptions={"Underutilized": 1})}
    delta = difference(base, after)["web"]
    assert delta["node_hours"] == 1
    assert delta["disruptions"] == {"Empty": -3, "Underutilized": 1}


def test_demand_needs_a_pool_and_a_window():
    with pytest.raises(DemandError, match="no events"):
        demand_of([])
    pending = E("PodPending", {"namespace": "default", "name": "p", "owner_name": "web"}, at(0))
    with pytest.raises(DemandError, match="no NodePool"):
        demand_of([pending, pending._replace(occurred_at=at(10))])
    with pytest.raises(DemandError, match="--from/--to"):
        demand_of([pending], start=at(10), end=at(5))


def test_a_pod_first_seen_bound_is_born_there():
    """A replacement's pod nominated and bound before the watcher saw it pending is the evicted
    pod's replacement, not a scale down (the flagship day's drift, recorded at --speed 720)."""
    pool = {"metadata": {"name": "batch"}, "spec": {}}
    pod = {"namespace": "default", "owner_kind": "Deployment", "labels": {"app": "batch"}}
    log = [
        E("NodePoolApplied", {"nodepool": "batch", "nodepool_object": pool}, at(0)),
        E("PodPending", {**pod, "name": "batch-1"}, at(0)),
        E("PodPending", {**pod, "name": "batch-2"}, at(0)),
        E("PodDeleted", {**pod, "name": "batch-1"}, at(100)),
        E("PodBound", {**pod, "name": "batch-3", "node": "n"}, at(115)),
        E("PodBound", {**pod, "name": "batch-1", "node": "n"}, at(116)),  # late, of a pod gone
        E("PodDeleted", {**pod, "name": "batch-2"}, at(300)),
        E("PodPending", {**pod, "name": "other", "labels": {"app": "other"}}, at(400)),
    ]
    spec = demand_of(log).document["spec"]
    assert {w["name"]: w["replicas"] for w in spec["workloads"]} == {"batch": 2, "other": 0}
    assert [e["scale"] for e in spec["timeline"]][:1] == [{"workload": "batch", "replicas": 1}]


def test_node_failures_replay_as_recorded_ready_and_agent_conditions_apart():
    """A kubelet's NotReady then Ready, and a node monitoring agent's KernelReady False then True,
    each replay as a `nodesNotReady` of its own condition for as long as the log had it; one not
    over by the log's end stays."""
    pool = {"metadata": {"name": "p"}, "spec": {}}
    node = {"nodepool": "p", "node": "n"}
    log = [
        E("NodePoolApplied", {"nodepool": "p", "nodepool_object": pool}, at(0)),
        E("NodeClaimNotReady", {**node, "nodeclaim": "a", "status": "Unknown"}, at(60)),
        E(
            "NodeClaimConditionChanged",
            {**node, "nodeclaim": "b", "condition": "KernelReady", "status": "False"},
            at(90),
        ),
        E("NodeClaimReady", {**node, "nodeclaim": "a"}, at(180)),
        E(
            "NodeClaimConditionChanged",
            {**node, "nodeclaim": "b", "condition": "KernelReady", "status": "True"},
            at(390),
        ),
        E(
            "NodeClaimConditionChanged",
            {**node, "nodeclaim": "c", "condition": "StorageReady", "status": "False"},
            at(400),
        ),
        E("PodPending", {"namespace": "default", "name": "x", "owner_name": "web"}, at(500)),
    ]
    timeline = demand_of(log).document["spec"]["timeline"]
    assert [e["nodesNotReady"] for e in timeline if "nodesNotReady" in e] == [
        {"nodepool": "p", "count": 1, "duration": "120s"},
        {"nodepool": "p", "count": 1, "duration": "300s", "condition": "KernelReady"},
        {"nodepool": "p", "count": 1, "condition": "StorageReady"},
    ]
