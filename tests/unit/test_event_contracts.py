"""Event contracts, the registry and its upcasters, the envelope."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import pytest
from pydantic import ValidationError

from shared.bus.names import BusNames
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.events.registry import REGISTRY, Registry, UnknownEventType
from tests.factories import applied, created, decided, new


def test_every_contract_is_registered_once_with_a_version():
    types = [contract.TYPE for contract in c.CONTRACTS]
    assert len(types) == len(set(types))
    assert REGISTRY.types() == sorted(types)
    assert all(contract.SCHEMA_VERSION >= 1 for contract in c.CONTRACTS)


@pytest.mark.parametrize(
    ("event", "stream", "subject_"),
    [
        (applied("web"), "nodepool-web", "default.events.nodepool.NodePoolApplied"),
        (created("web-x1", "web"), "nodeclaim-web-x1", "default.events.nodeclaim.NodeClaimCreated"),
        (decided("d-1", "web", "Drifted", ["a"]), "disruption-d-1", "default.events.disruption.DisruptionDecided"),
        (c.PodPending(namespace="ns", name="p"), "pod-ns/p", "default.events.pod.PodPending"),
        (c.NodeDeleted(node="ip-1"), "node-ip-1", "default.events.node.NodeDeleted"),
        (
            c.DaemonSetApplied(namespace="kube-system", name="agent"),
            "daemonset-kube-system/agent",
            "default.events.daemonset.DaemonSetApplied",
        ),
        (
            c.DaemonSetDeleted(namespace="kube-system", name="agent"),
            "daemonset-kube-system/agent",
            "default.events.daemonset.DaemonSetDeleted",
        ),
    ],
)
def test_streams_and_subjects(event, stream, subject_):
    assert event.stream_id == stream
    assert BusNames().event_subject(event.stream_id, event.TYPE) == subject_
    assert BusNames("blue-2").event_subject(event.stream_id, event.TYPE) == subject_.replace("default.", "blue-2.", 1)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: decided("d", "p", "Sleepy", ["a"]), "reason"),
        (lambda: c.DisruptionDecided(decision_id="d", nodepool="p", reason="Empty", candidates=[]), "candidates"),
        (lambda: c.NodeClaimCreated(nodeclaim="a", nodepool="p", instance_types=[]), "instance_types"),
        (
            lambda: c.NodeClaimLaunched(
                nodeclaim="a", nodepool="p", instance_type="t", capacity={"cpu": "four"}, provider_id="x"
            ),
            "capacity.cpu",
        ),
        (lambda: c.NodeClaimInitialized(nodeclaim="a", nodepool="p", extra=1), "extra"),
        (lambda: c.DaemonSetApplied(namespace="ns", name="ds", requests={"cpu": "lots"}), "requests.cpu"),
        (lambda: c.DaemonSetApplied(namespace="ns", name="ds", tolerations={"key": "x"}), "tolerations"),
        (lambda: c.PodBound(namespace="ns", name="p", node="n", affinity=["podAntiAffinity"]), "affinity"),
    ],
)
def test_bad_payloads_name_the_field(build, field):
    with pytest.raises(ValidationError) as caught:
        build()
    assert field in str(caught.value)


ANTI_WEB = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


@pytest.mark.parametrize(
    ("event_type", "payload", "expected"),
    [
        # written before PodBound carried affinity: still version 1, decodes with none
        ("PodBound", {"namespace": "ns", "name": "p", "node": "n", "uid": "u"}, {"affinity": None}),
        ("PodBound", {"namespace": "ns", "name": "p", "node": "n", "affinity": ANTI_WEB}, {"affinity": ANTI_WEB}),
        (
            "DaemonSetApplied",
            {"namespace": "ns", "name": "ds", "requests": {"cpu": "100m"}, "resource_version": 4},
            {"requests": {"cpu": "100m"}, "node_selector": {}, "affinity": None, "tolerations": []},
        ),
        ("DaemonSetDeleted", {"namespace": "ns", "name": "ds"}, {"stream_id": "daemonset-ns/ds"}),
    ],
)
def test_new_fields_are_optional_and_round_trip(event_type, payload, expected):
    event = REGISTRY.decode(event_type, 1, payload)
    assert {name: getattr(event, name) for name in expected} == expected
    assert event.payload().items() >= payload.items()  # nothing given is lost or changed
    assert ("affinity" in event.payload()) == ("affinity" in payload)  # absent stays absent
    assert REGISTRY.decode(event_type, 1, event.payload()) == event


def test_payloads_decode_back_to_the_same_event():
    for event in (applied("p"), created("a", "p", ("4", "16Gi")), decided("d", "p", "Empty", ["a"])):
        assert REGISTRY.decode(event.TYPE, 1, event.payload()) == event


class PodPendingV2(c.PodEvent):
    """A later PodPending that renamed `priority` to `priority_value` and added a class name."""

    TYPE: ClassVar[str] = "PodPending"
    SCHEMA_VERSION: ClassVar[int] = 3
    priority_value: int = 0
    priority_class: str = ""


def test_upcasters_lift_old_payloads_step_by_step():
    registry = Registry([PodPendingV2])

    @registry.upcaster("PodPending", 1)
    def rename(payload):
        payload["priority_value"] = payload.pop("priority", 0)
        payload.pop("requests", None)
        payload.pop("node_selector", None)
        return payload

    @registry.upcaster("PodPending", 2)
    def add_class(payload):
        payload["priority_class"] = "high" if payload["priority_value"] > 100 else "default"
        return payload

    old = {"namespace": "ns", "name": "p", "requests": {}, "node_selector": {}, "priority": 1000}  # a v1 payload
    lifted = registry.decode("PodPending", 1, old)
    assert lifted == PodPendingV2(namespace="ns", name="p", priority_value=1000, priority_class="high")
    assert registry.decode("PodPending", 3, lifted.payload()) == lifted
    with pytest.raises(ValueError, match="newer than this build"):
        registry.decode("PodPending", 4, old)
    with pytest.raises(ValueError, match="makes no sense"):
        registry.add_upcaster("PodPending", 3, rename)


def test_a_missing_upcaster_or_type_is_a_clear_error():
    registry = Registry([PodPendingV2])
    with pytest.raises(LookupError, match="no upcaster for PodPending from v1 to v2"):
        registry.upcast("PodPending", 1, {})
    with pytest.raises(UnknownEventType, match="NodeExploded"):
        registry.decode("NodeExploded", 1, {})


def test_recorded_events_round_trip_through_json():
    event = new(created("a", "p"), correlation_id="corr-1")
    recorded = RecordedEvent(
        position=7,
        event_id=event.event_id,
        stream_id=event.stream_id,
        version=1,
        type=event.type,
        schema_version=1,
        data=event.data,
        metadata=event.metadata,
        occurred_at=event.occurred_at,
        recorded_at=datetime(2026, 11, 23, 12, 0, 1, tzinfo=UTC),
    )
    assert RecordedEvent.from_json_dict(recorded.to_json_dict()) == recorded
    assert recorded.metadata == Metadata("test", None, "corr-1")
    assert BusNames().event_subject(recorded.stream_id, recorded.type) == "default.events.nodeclaim.NodeClaimCreated"
    assert BusNames("blue").event_subject(recorded.stream_id, recorded.type) == "blue.events.nodeclaim.NodeClaimCreated"
