"""The watcher's NodeOverlay facts and conditions (`services.watcher.overlays`): a spec recorded
once per change (not on status writes), its end when deleted or no longer valid, a restart that
reports only what changed, the gate off taking back what the log holds; and upstream's
ValidationSucceeded/Ready conditions from a resolution."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.watcher.overlays import Overlays, conditions
from shared.ports.cluster import ADDED, DELETED, MODIFIED, NODEOVERLAY, Snapshot, WatchEvent
from shared.scheduling.overlays import Resolution
from tests.factories import T0

OVERLAY: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "o", "resourceVersion": "1"},
    "spec": {"requirements": [{"key": "example.com/family", "operator": "In", "values": ["m5"]}], "price": "0.1"},
}


def change(version: int, action: str = ADDED, **spec: Any) -> WatchEvent:
    document = copy.deepcopy(OVERLAY)
    document["spec"].update(spec)
    document["metadata"]["resourceVersion"] = str(version)
    return WatchEvent(version, NODEOVERLAY, action, "o", {} if action == DELETED else document)


def types(facts: list) -> list[str]:
    return [f.event.TYPE for f in facts]


def test_a_spec_is_recorded_once_per_change_and_its_end_once():
    overlays = Overlays(enabled=True)
    assert types(overlays.observe(change(1))) == ["NodeOverlayApplied"]
    with_status = change(2, MODIFIED)
    with_status.object["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert overlays.observe(with_status) == []  # our own status write
    assert types(overlays.observe(change(3, MODIFIED, price="0.2"))) == ["NodeOverlayApplied"]
    assert types(overlays.observe(change(4, MODIFIED, price="-1"))) == ["NodeOverlayDeleted"]  # no longer valid
    assert overlays.observe(change(5, DELETED)) == []  # never in force since


def test_a_restart_reports_only_what_changed_and_the_gate_off_takes_overlays_back():
    first = Overlays(enabled=True)
    recorded = [f.event for f in first.observe(change(1))]
    again = Overlays(enabled=True)
    again.remember(recorded)
    assert again.resync(Snapshot(5, [change(1)])) == []
    gone = Overlays(enabled=True)
    gone.remember(recorded)
    assert types(gone.resync(Snapshot(5, []))) == ["NodeOverlayDeleted"]
    off = Overlays(enabled=False)
    off.remember(recorded)
    assert types(off.resync(Snapshot(5, [change(1)]))) == ["NodeOverlayDeleted"]
    assert off.observe(change(6, MODIFIED, price="0.3")) == []


def resolution(**kw: Any) -> Resolution:
    return Resolution({}, frozenset(kw.get("conflicting", ())), kw.get("invalid", {}), frozenset(kw.get("applied", ())))


@pytest.mark.parametrize(
    ("resolved", "validation", "ready"),
    [
        (resolution(applied={"o"}), ("True", "ValidationSucceeded", ""), ("True", "Ready", "")),
        (
            resolution(conflicting={"o"}),
            ("False", "Conflict", "conflict with another overlay"),
            ("False", "UnhealthyDependents", "ValidationSucceeded=False"),
        ),
        (
            resolution(invalid={"o": "invalid value: x in requirements, restricted"}),
            ("False", "RuntimeValidation", "invalid value: x in requirements, restricted"),
            ("False", "UnhealthyDependents", "ValidationSucceeded=False"),
        ),
    ],
)
def test_conditions_are_upstreams(resolved: Resolution, validation: tuple, ready: tuple) -> None:
    written = conditions("o", resolved, T0)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in written] == [
        ("ValidationSucceeded", *validation),
        ("Ready", *ready),
    ]


def test_an_unchanged_status_keeps_its_transition_time():
    earlier = [{"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00+00:00"}]
    written = conditions("o", resolution(applied={"o"}), T0, earlier)
    assert written[1]["lastTransitionTime"] == "2020-01-01T00:00:00+00:00"
    assert written[0]["lastTransitionTime"] == T0.isoformat()
