"""The instance types the passes plan with (`shared.runtime.catalogs`): asked again once stale,
kept through a failed refresh, and per EC2NodeClass for the pools a pass may launch in."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from typing import Any

import pytest

from services.scheduler.projection import Projection
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.ports.cloud import CloudError
from shared.runtime.catalogs import REFRESH, RETRY, Catalogs
from shared.scheduling.offerings import InstanceOption, Offer
from tests.conftest import nodepool_doc
from tests.factories import T0, catalog_answer


def option(pods: int) -> InstanceOption:
    room = {"cpu": 4, "memory": 16 * 2**30, "pods": pods}
    return InstanceOption(
        "m.large", room, room, {"node.kubernetes.io/instance-type": "m.large"}, (Offer("a", "spot", 0.1),)
    )


class Cloud:
    """Answers every class with its own pods figure (the default 110); `failing`: raise."""

    def __init__(self, pods: dict[str, int] | None = None) -> None:
        self.pods = pods or {}
        self.asked: list[str | None] = []
        self.failing = False

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        self.asked.append(node_class)
        if self.failing:
            raise CloudError("EC2 did not answer")
        if node_class is not None and node_class not in self.pods:
            raise CloudError(f"EC2NodeClass {node_class} not found")
        return catalog_answer([option(self.pods.get(node_class or "", 110))])


def pods_of(options: Any) -> list[int]:
    return [int(o.allocatable["pods"]) for o in options]


def catalogs_of(cloud: Cloud) -> Catalogs:
    return Catalogs(cloud, monotonic=lambda: 0.0)  # type: ignore[arg-type]


def load(catalogs: Catalogs, at: timedelta, view: Projection | None = None):
    """A load `at` into the process's life (its monotonic clock, not the simulated one)."""
    catalogs.monotonic = lambda: at.total_seconds()
    return asyncio.run(catalogs.load(view))


def test_the_catalog_is_asked_again_once_stale():
    cloud = Cloud()
    catalogs = catalogs_of(cloud)
    for at in (timedelta(0), timedelta(seconds=REFRESH - 1), timedelta(seconds=REFRESH)):
        assert pods_of(load(catalogs, at).catalog) == [110]
    assert cloud.asked == [None, None]


def test_a_failed_refresh_keeps_the_known_catalog_and_waits_before_trying_again(caplog):
    cloud = Cloud()
    catalogs = catalogs_of(cloud)
    load(catalogs, timedelta(0))
    cloud.failing = True
    with caplog.at_level(logging.WARNING, "nodewright.catalogs"):
        assert pods_of(load(catalogs, timedelta(seconds=REFRESH)).catalog) == [110]
    assert "keeping the 1 known: EC2 did not answer" in caplog.text
    load(catalogs, timedelta(seconds=REFRESH + RETRY - 1))
    assert len(cloud.asked) == 2  # not at every pass while EC2 is out
    cloud.failing = False
    load(catalogs, timedelta(seconds=REFRESH + RETRY))
    assert len(cloud.asked) == 3


def test_the_first_answer_failing_is_the_callers_error():
    cloud = Cloud()
    cloud.failing = True
    with pytest.raises(CloudError, match="EC2 did not answer"):
        load(catalogs_of(cloud), timedelta(0))


def recorded(position: int, event: c.Event) -> RecordedEvent:
    at = T0 + timedelta(seconds=position)
    return RecordedEvent(
        position, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, event.payload(), Metadata("t"), at, at
    )


def view(*, gated: bool, ready: dict[str, bool]) -> Projection:
    """Pools `small`, `big` and `plain` on classes of those names (`sim` on a class of another
    kind), the classes' readiness as given."""
    events: list[c.Event] = []
    for pool, kind in (("small", "EC2NodeClass"), ("big", "EC2NodeClass"), ("sim", "SimNodeClass")):
        ref = {"group": "karpenter.k8s.aws", "kind": kind, "name": pool}
        doc = nodepool_doc(**{"metadata.name": pool, "spec.template.spec.nodeClassRef": ref})
        events.append(c.NodePoolApplied(nodepool=pool, nodepool_object=doc))
    events += [
        c.NodeClassStatusChanged(nodeclass=n, ready=r, reason="Ready" if r else "AMIsNotFound")
        for n, r in ready.items()
    ]
    projection = Projection(gated=gated)
    projection.apply(recorded(i, e) for i, e in enumerate(events, 1))
    return projection


@pytest.mark.parametrize(
    ("gated", "ready", "pools"),
    [
        (True, {"small": True, "big": True}, {"small": [4], "big": [110]}),
        (True, {"small": True, "big": False}, {"small": [4]}),  # a pool left out: its class not asked
        (True, {}, {}),  # classes never resolved: nobody launches there
        (False, {"small": True, "big": True}, {}),  # the sim: one catalog for every pool
    ],
)
def test_each_ready_pool_on_an_ec2nodeclass_plans_with_its_classes_catalog(gated: bool, ready: dict, pools: dict):
    cloud = Cloud({"small": 4, "big": 110})
    loaded = load(catalogs_of(cloud), timedelta(0), view(gated=gated, ready=ready))
    assert {pool: pods_of(options) for pool, options in loaded.pools.items()} == pools
    assert sorted(a for a in cloud.asked if a is not None) == sorted(pools)


def test_a_class_that_cannot_be_read_leaves_its_pool_nothing_rather_than_the_defaults(caplog):
    cloud = Cloud({"big": 110})  # `small` cannot be read
    catalogs = catalogs_of(cloud)
    ready = view(gated=True, ready={"small": True, "big": True})
    with caplog.at_level(logging.WARNING, "nodewright.catalogs"):
        loaded = load(catalogs, timedelta(0), ready)
    assert loaded.pools["small"] == [] and pods_of(loaded.pools["big"]) == [110]
    assert "EC2NodeClass small not refreshed, none known yet: EC2NodeClass small not found" in caplog.text
    cloud.pods["small"] = 4
    assert pods_of(load(catalogs, timedelta(seconds=RETRY), ready).pools["small"]) == [4]


def test_a_class_no_pool_launches_from_is_forgotten_and_read_afresh_when_one_does_again():
    cloud = Cloud({"small": 4, "big": 110})
    catalogs = catalogs_of(cloud)
    load(catalogs, timedelta(0), view(gated=True, ready={"small": True, "big": True}))
    load(catalogs, timedelta(seconds=1), view(gated=True, ready={"small": True, "big": False}))
    cloud.pods["big"] = 58  # its kubelet changed while no pool launched from it
    again = load(catalogs, timedelta(seconds=2), view(gated=True, ready={"small": True, "big": True}))
    assert pods_of(again.pools["big"]) == [58] and cloud.asked.count("small") == 1
