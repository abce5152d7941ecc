"""A planned claim as the log records it, and the cloud's instance types as the scheduling core
takes them: one place for both, for the scheduler's passes and disruption's replacements."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from shared.api.quantity import format_quantity, parse
from shared.events import contracts as c
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.packing import claim_requirements
from shared.scheduling.values import PlannedClaim


def claim_name(nodepool: str) -> str:
    return f"{nodepool}-{uuid.uuid4().hex[:8]}"


def claim_created(name: str, claim: PlannedClaim, replacement_for: str | None = None) -> c.NodeClaimCreated:
    """The NodeClaimCreated of a planned claim: a pass's own, or a disruption's replacement."""
    requirements = [r.to_dict() for v in claim_requirements(claim).values() for r in v.to_requirements()]
    return c.NodeClaimCreated(
        nodeclaim=name,
        nodepool=claim.nodepool,
        instance_types=[
            c.InstanceTypeOption(name=o.instance.name, capacity=_strings(o.instance.capacity), price=o.price)
            for o in claim.options
        ],
        pods=[] if replacement_for else claim.pods,
        requirements=requirements,
        requests=_strings({k: v for k, v in claim.used.items() if k != "pods"}),
        replacement_for=replacement_for,
        min_values_relaxed=claim.min_values_relaxed,
    )


def instance_option(raw: Mapping[str, Any]) -> InstanceOption:
    """A port instance type as the core takes it. An offering the cloud flags `available: false`
    (no subnet in its zone, no price now) is kept apart, where scheduling never looks and drift
    does; one without the flag (the sim's) is available."""
    offers: list[Offer] = []
    unavailable: list[Offer] = []
    for o in raw["offerings"]:
        (offers if o.get("available", True) else unavailable).append(
            Offer(o["zone"], o["capacityType"], float(o["price"]))
        )
    return InstanceOption(
        raw["name"],
        {k: parse(str(v)) for k, v in raw["capacity"].items()},
        {k: parse(str(v)) for k, v in raw["allocatable"].items()},
        dict(raw["labels"]),
        tuple(offers),
        tuple(unavailable),
    )


def _strings(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in ("memory", "ephemeral-storage")) for k, v in values.items()}
