"""Kubernetes Events from the services: deduplicated per object (its uid when known) and reason
within a window on the shared clock; the sim aggregates repeats as the API server does."""

from __future__ import annotations

from datetime import timedelta

import pytest

from services.sim.cluster import SimCluster
from shared.ports.cluster import NORMAL, WARNING, KubeEvent
from shared.runtime.recorder import Recorder
from tests.factories import T0

FAILED = KubeEvent("Pod", "default/web-1", WARNING, "FailedScheduling", "Failed to schedule pod, no nodepool is ready")


@pytest.mark.parametrize(
    ("second", "after", "due"),
    [
        (FAILED, timedelta(seconds=0), False),
        (FAILED, timedelta(seconds=119), False),
        (FAILED, timedelta(minutes=2), True),
        (KubeEvent("Pod", "default/web-2", WARNING, FAILED.reason, FAILED.message), timedelta(0), True),
        (KubeEvent("Pod", "default/web-1", WARNING, FAILED.reason, "another reason"), timedelta(0), False),
        (
            KubeEvent("Pod", "default/web-1", NORMAL, "Nominated", "Pod should schedule on: nodeclaim/a"),
            timedelta(0),
            True,
        ),
        (KubeEvent("Pod", "default/web-1", WARNING, FAILED.reason, FAILED.message, uid="u2"), timedelta(0), True),
    ],
)
def test_an_event_repeats_only_after_its_window(second, after, due):
    recorder = Recorder(None)
    assert recorder.due(FAILED, T0)
    assert recorder.due(second, T0 + after) is due


class Refusing:
    def __init__(self) -> None:
        self.sent: list[KubeEvent] = []
        self.refuse = True

    async def record_event(self, event: KubeEvent) -> None:
        if self.refuse:
            raise TimeoutError
        self.sent.append(event)


async def test_an_event_that_could_not_be_delivered_is_tried_again_next_time():
    cluster = Refusing()
    recorder = Recorder(cluster)  # type: ignore[arg-type]
    many = [KubeEvent("Pod", f"default/web-{i}", WARNING, FAILED.reason, FAILED.message) for i in range(40)]
    assert await recorder.publish(many, T0) == 0
    cluster.refuse = False
    assert await recorder.publish([*many, *many], T0 + timedelta(seconds=1)) == 40 and cluster.sent == many


def test_the_sim_aggregates_repeats_like_the_api_server():
    cluster = SimCluster()
    cluster.record_event(FAILED, T0)
    cluster.record_event(KubeEvent("NodePool", "a", NORMAL, "x", "y"), T0)
    cluster.record_event(FAILED, T0 + timedelta(minutes=3))
    (event,) = cluster.events_about("Pod", "default/web-1")
    assert event["count"] == 2 and event["firstTimestamp"] == T0.isoformat()
    assert event["lastTimestamp"] == (T0 + timedelta(minutes=3)).isoformat()
    assert [e["kind"] for e in cluster.events_about()] == ["NodePool", "Pod"]  # the repeat is the newest
