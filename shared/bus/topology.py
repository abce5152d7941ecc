"""What each service does on the bus, in one place: the projections that follow every event, the
work consumers that share one event type between replicas, and which of the sim's requests each
service sends. `shared.bus.identity` grants exactly this, `shared.bus.setup` provisions it."""

from __future__ import annotations

from dataclasses import dataclass

PROJECTIONS = ("scheduler", "disruption", "termination")
"""Services whose replicas each keep a projection of the whole log (`shared.bus.projection`)."""


@dataclass(frozen=True, slots=True)
class Work:
    """A durable pull consumer shared by a service's replicas (`shared.bus.work`)."""

    service: str
    event_type: str
    max_ack_pending: int = 1000

    @property
    def durable(self) -> str:
        return f"{self.service}-{self.event_type}"


WORK = (Work("termination", "NodeClaimDeletionRequested"),)

SIM_CALLERS: dict[str, tuple[str, ...]] = {
    "scheduler": ("cloud.instance-types", "cloud.create", "cloud.list"),
    "disruption": ("cloud.instance-types", "cloud.list"),
    "watcher": ("cloud.instance-types",),
    "termination": ("cloud.delete", "cloud.list"),
}
"""The sim's cloud requests each service may send: the sim answers nothing else from it. The
cluster is the Kubernetes API's (`shared.adapters.kube`), not the bus's."""


def work_of(service: str) -> tuple[Work, ...]:
    return tuple(work for work in WORK if work.service == service)


def callers_of(request: str) -> tuple[str, ...]:
    return tuple(caller for caller, requests in SIM_CALLERS.items() if request in requests)
