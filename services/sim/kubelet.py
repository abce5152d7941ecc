"""The sim's kubelets for instances of a real cloud API (EC2 in moto): a Node registers for each
running instance tagged for the cluster, as the kubelet the instance boots would, and goes with
the instance.

With the sim's own cloud, the world launches instances and registers their nodes itself. With
another cloud (`NODEWRIGHT_CLOUD=aws`), nodewright's provider launches instances there and the
sim only sees them: `Kubelets.observe` is told what the cloud runs now, and registers each new
instance's Node after the launch latency (Ready after the registration latency, startup taints
then removed), named after its NodeClaim as the sim names every node. What a kubelet reads from
its configuration (the NodeClaim's labels, taints, capacity and allocatable, as nodewright's
bootstrap would pass them) comes from the NodeClaim object. An instance no longer running has its
Node deleted, as the cloud's node controller does. Pure: the world calls it with the instant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from services.sim.cluster import Node, SimCluster
from shared.api.core import Taint
from shared.api.labels import HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL
from shared.api.quantity import parse


@dataclass(frozen=True, slots=True)
class SeenInstance:
    """An instance as the cloud lists it: what a kubelet on it would know of itself."""

    provider_id: str
    nodeclaim: str
    instance_type: str
    zone: str

    def to_dict(self) -> dict[str, str]:
        return {
            "providerID": self.provider_id,
            "nodeclaim": self.nodeclaim,
            "instanceType": self.instance_type,
            "zone": self.zone,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SeenInstance:
        return cls(str(data["providerID"]), str(data["nodeclaim"]), str(data["instanceType"]), str(data["zone"]))


CloudInstances = Callable[[], Awaitable[list[SeenInstance]]]
"""What another cloud runs now, for the sim's kubelets (`services.sim.ec2` asks EC2)."""


class Kubelets:
    def __init__(self, cluster: SimCluster, at: Callable[[datetime, Callable[[], None]], None]) -> None:
        """`at(instant, step)`: the world's timeline, for a registration after its latency."""
        self.cluster = cluster
        self._at = at
        self.seen: dict[str, SeenInstance] = {}  # provider id -> the instance, while it runs
        self.registered: dict[str, str] = {}  # provider id -> its node's name

    def observe(
        self, running: Iterable[SeenInstance], now: datetime, launch: timedelta, registration: timedelta
    ) -> bool:
        """What the cloud runs now: new instances boot (their Node registers `launch` later, Ready
        `registration` after that), those gone lose their Node. Whether anything changed."""
        current = {i.provider_id: i for i in running if i.nodeclaim}
        changed = False
        for provider_id, instance in current.items():
            if provider_id in self.seen:
                continue
            self.seen[provider_id] = instance
            registers = now + launch
            self._at(registers, lambda i=instance, r=registers: self._register(i, r, registration))
            changed = True
        for provider_id in [p for p in self.seen if p not in current]:
            gone = self.seen.pop(provider_id)
            name = self.registered.pop(provider_id, None)
            if name is not None and name in self.cluster.nodes:
                node = self.cluster.nodes[name]
                self.cluster.request_node_deletion(name, now)
                if node.finalizers:  # its kubelet gone with the instance: NotReady until it goes
                    self.cluster.set_ready(name, False, now)
            self.cluster.nodeclaim_gone(gone.nodeclaim)
            changed = True
        return changed

    def _register(self, instance: SeenInstance, now: datetime, registration: timedelta) -> None:
        """The kubelet registers its Node, with what its NodeClaim says; a claim not written yet
        (or without the capacity its launch reports) is looked at again a little later."""
        if instance.provider_id not in self.seen or instance.provider_id in self.registered:
            return
        claim = self.cluster.nodeclaims.get(instance.nodeclaim)
        status = (claim or {}).get("status") or {}
        if claim is None or not status.get("allocatable"):
            retry = now + max(registration, timedelta(seconds=1))  # never the same instant again
            self._at(retry, lambda: self._register(instance, retry, registration))
            return
        spec = claim.get("spec") or {}
        labels = {
            **((claim.get("metadata") or {}).get("labels") or {}),
            INSTANCE_TYPE_LABEL: instance.instance_type,
            ZONE_LABEL: instance.zone,
            HOSTNAME_LABEL: instance.nodeclaim,
        }
        startup = [Taint.model_validate(t) for t in spec.get("startupTaints") or []]
        taints = [Taint.model_validate(t) for t in spec.get("taints") or []] + startup
        node = Node(
            instance.nodeclaim,
            instance.provider_id,
            labels,
            taints,
            _quantities(status.get("capacity") or {}),
            _quantities(status["allocatable"]),
            now,
        )
        self.cluster.add_node(node)
        self.registered[instance.provider_id] = node.name
        ready = now + registration
        self._at(ready, lambda: self._ready(instance, startup, ready))

    def _ready(self, instance: SeenInstance, startup: list[Taint], at: datetime) -> None:
        name = self.registered.get(instance.provider_id)
        if name is None or name not in self.cluster.nodes:
            return
        self.cluster.set_ready(name, True, at)
        for taint in startup:
            self.cluster.untaint(name, taint.key, taint.effect)


def _quantities(raw: Mapping[str, Any]) -> dict[str, Decimal]:
    return {name: parse(str(value)) for name, value in raw.items()}
