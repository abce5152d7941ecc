"""A run told from its log alone (`cli.summary`) and written as a report
(`cli.report`): the promises it checks, and the files it writes."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cli import report
from cli.summary import summarise
from shared.policy.audit import LogEntry, Replay

T0 = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)  # a Monday


def pool(name: str, nodes: str | None = None, budgets: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "d"},
                "requirements": [],
            }
        },
        "disruption": {"budgets": budgets or [{"nodes": "10%"}]},
    }
    if nodes is not None:
        spec["limits"] = {"nodes": nodes}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


class Log:
    """Events in position order, each at `T0 + minutes`."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []

    def add(self, minutes: float, kind: str, **data: Any) -> None:
        stream = f"nodeclaim-{data['nodeclaim']}" if "nodeclaim" in data else f"nodepool-{data.get('nodepool')}"
        at = T0 + timedelta(minutes=minutes)
        self.entries.append(LogEntry(len(self.entries) + 1, stream, kind, data, at))

    def apply(self, minutes: float, document: dict[str, Any]) -> None:
        self.add(minutes, "NodePoolApplied", nodepool=document["metadata"]["name"], nodepool_object=document)

    def create(self, minutes: float, name: str, nodepool: str = "web", **extra: Any) -> None:
        self.add(minutes, "NodeClaimCreated", nodepool=nodepool, nodeclaim=name, instance_types=[], **extra)

    def summary(self) -> tuple[dict[str, Any], Any]:
        replay = Replay()
        replay.feed(self.entries)
        return summarise("t", self.entries, replay, [], True, None)


def test_a_lowered_limit_is_not_passed_but_a_launch_above_the_limit_in_force_is():
    log = Log()
    log.apply(0, pool("web", "2"))
    log.create(1, "a")
    log.create(2, "b")
    log.apply(3, pool("web", "1"))  # now over the limit: lowered, not passed
    summary, _ = log.summary()
    assert summary["over_limit"] == [] and summary["node_limits"] == {"web": [2, 1]}
    log.create(4, "c")  # 3 nodes under a limit of 1: passed
    summary, _ = log.summary()
    assert [o["nodeclaim"] for o in summary["over_limit"]] == ["c"]
    assert summary["max_nodes"] == {"web": 3}


@pytest.mark.parametrize(
    ("reason", "decided_at_minutes", "inside"),
    [
        ("Underutilized", 9 * 60 + 30, True),  # 15:30 UTC, in the 15:00 + 9 h block
        ("Underutilized", 8 * 60 + 30, False),  # 14:30, before it
        ("Underutilized", 18 * 60 + 1, False),  # 00:01, after it
        ("Empty", 9 * 60 + 30, False),  # the block is for Underutilized only
        ("OverLimit", 9 * 60 + 30, False),  # forceful: budgets do not apply
    ],
)
def test_a_disruption_decided_inside_a_window_its_budget_blocks_is_reported(reason, decided_at_minutes, inside):
    block = {"nodes": "0", "reasons": ["Underutilized"], "schedule": "0 15 * * mon-fri", "duration": "9h"}
    log = Log()
    log.apply(0, pool("backend", budgets=[block, {"nodes": "1"}]))
    log.create(1, "x", nodepool="backend")
    log.add(
        decided_at_minutes, "DisruptionDecided", nodepool="backend", decision_id="d1", reason=reason, candidates=["x"]
    )
    log.add(
        decided_at_minutes + 1,
        "NodeClaimDeletionRequested",
        nodepool="backend",
        nodeclaim="x",
        reason=reason,
        decision_id="d1",
    )
    log.add(decided_at_minutes + 5, "NodeClaimTerminated", nodepool="backend", nodeclaim="x")
    log.add(20 * 60, "PodPending", namespace="default", name="late")  # the log, so the windows, end at 02:00
    summary, timeline = log.summary()
    assert [w.reason for w in timeline.blocked] == ["Underutilized"]
    assert (timeline.blocked[0].start, timeline.blocked[0].end) == (T0 + timedelta(hours=9), T0 + timedelta(hours=18))
    assert bool(summary["disruptions_inside_blocked_windows"]) is inside
    assert summary["disruptions"] == {reason: 1} and summary["decisions_by_reason"] == {reason: 1}
    assert summary["instances_lost"] == 0


def test_a_decision_says_the_pool_of_each_replacement():
    log = Log()
    log.apply(0, pool("lo"))
    log.apply(0, pool("hi"))
    log.create(1, "lo-1", "lo")
    log.add(
        5,
        "DisruptionDecided",
        decision_id="d",
        nodepool="lo",
        reason="Drifted",
        candidates=["lo-1"],
        replacements=["hi-r", "lo-r"],
        replacement_nodepools={"hi-r": "hi"},
    )
    log.create(6, "hi-r", "hi", replacement_for="d", replacement_from="lo")
    summary, _ = log.summary()
    (decision,) = summary["decisions"]
    assert decision["replacement_nodepools"] == {"hi-r": "hi", "lo-r": "lo"}
    assert summary["max_nodes"] == {"hi": 1, "lo": 1}


def test_pending_pods_instances_lost_and_the_three_sample_claims():
    log = Log()
    log.apply(0, pool("web", "5"))
    for i in range(3):
        log.add(1, "PodPending", namespace="default", name=f"p{i}")
    for name in ("a", "b", "c"):
        log.create(2, name)
    for i, node in enumerate("abc"):
        log.add(3, "PodBound", namespace="default", name=f"p{i}", node=node)
    log.add(30, "NodeClaimTerminated", nodepool="web", nodeclaim="a")  # the cloud took it: nobody asked
    log.add(40, "NodeClaimDeletionRequested", nodepool="web", nodeclaim="b", reason="Drifted", decision_id="d")
    log.add(41, "NodeClaimDeletionRequested", nodepool="web", nodeclaim="c", reason="Empty", decision_id="e")
    log.add(50, "PodPending", namespace="default", name="p9")
    summary, timeline = log.summary()
    assert [v for _, v in timeline.pending] == [1, 2, 3, 2, 1, 0, 1]
    assert summary["pending_pods_at_end"] == 1
    assert summary["instances_lost"] == 1 and [p for _, p in timeline.lost] == ["web"]
    assert summary["samples"] == {"burst": "a", "consolidated": "c", "drifted": "b"}
    assert [t["nodeclaim"] for t in summary["terminations"]] == ["b", "c"]


def test_the_report_writes_a_picture_a_page_and_the_summary(tmp_path):
    log = Log()
    block = {"nodes": "0", "reasons": ["Drifted"], "schedule": "0 12 * * *", "duration": "2h"}
    log.apply(0, pool("web", "4", budgets=[block, {"nodes": "1"}]))
    log.create(1, "a")
    log.create(2, "b")
    log.add(60, "DisruptionDecided", nodepool="web", decision_id="d", reason="Drifted", candidates=["a"])
    log.add(61, "NodeClaimDeletionRequested", nodepool="web", nodeclaim="a", reason="Drifted", decision_id="d")
    log.add(70, "NodeClaimTerminated", nodepool="web", nodeclaim="a")
    summary, timeline = log.summary()
    paths = report.write(tmp_path / "out", summary, timeline, log.entries)
    assert [p.name for p in paths] == ["nodes.png", "report.md", "summary.json"]
    png = (tmp_path / "out" / "nodes.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert 800 <= width <= 3000 and 500 <= height <= 2000 and len(png) > 20_000
    page = (tmp_path / "out" / "report.md").read_text()
    assert "| Drifted | 1 | 1 |" in page and "### a (drifted)" in page and "nodes.png" in page
    assert "never passed by a launch" in page
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["disruptions"] == {"Drifted": 1}
