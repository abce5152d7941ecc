"""The sim cloud's requests and answers as the `CloudProvider` port carries them (dicts of
strings): what the sim service answers over NATS and what the in-process cloud
(`services.sim.inprocess`) hands back, so the two never differ."""

from __future__ import annotations

from typing import Any

from services.sim.catalog import InstanceType
from services.sim.cloud import Instance, LaunchRequest
from shared.api.core import Requirement, Taint
from shared.api.quantity import parse


def launch_request(body: dict[str, Any]) -> LaunchRequest:
    return LaunchRequest(
        nodeclaim=body["nodeclaim"],
        nodepool=body["nodepool"],
        requirements=[Requirement.model_validate(r) for r in body.get("requirements") or []],
        requests={k: parse(str(v)) for k, v in (body.get("requests") or {}).items()},
        labels=dict(body.get("labels") or {}),
        taints=[Taint.model_validate(t) for t in body.get("taints") or []],
        startup_taints=[Taint.model_validate(t) for t in body.get("startupTaints") or []],
        prioritized=[str(name) for name in body.get("prioritized") or []],
    )


def instance_view(instance: Instance) -> dict[str, Any]:
    it = instance.instance_type
    return {
        "providerID": instance.provider_id,
        "nodeclaim": instance.request.nodeclaim,
        "nodepool": instance.request.nodepool,
        "instanceType": it.name,
        "zone": instance.offering.zone,
        "capacityType": instance.offering.capacity_type,
        "price": instance.offering.price,
        "capacity": it.capacity_strings(),
        "allocatable": it.allocatable_strings(),
        "labels": instance.labels,
        "launchedAt": instance.launched_at.isoformat(),
        "state": instance.state,
        "interruptedAt": instance.interrupted_at.isoformat() if instance.interrupted_at else None,
    }


def instance_type_view(it: InstanceType) -> dict[str, Any]:
    return {
        "name": it.name,
        "capacity": it.capacity_strings(),
        "allocatable": it.allocatable_strings(),
        "labels": dict(it.labels),
        "offerings": [{"zone": o.zone, "capacityType": o.capacity_type, "price": o.price} for o in it.offerings],
    }
