"""PodDisruptionBudgets as disruption sees them (upstream's
`pkg/controllers/disruption/pdblimits.go`): how many disruptions a budget allows now, and whether it
blocks every eviction whatever the pods' health."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.api.pod import LabelSelector


@dataclass(frozen=True, slots=True)
class Pdb:
    namespace: str
    name: str
    selector: LabelSelector
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    unhealthy_always_allow: bool = False
    """`unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not Ready may always go."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return namespace == self.namespace and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class Member:
    """A pod a budget selects: whether it is healthy (bound to a Ready node and running)."""

    healthy: bool


def scaled(value: int | str, total: int) -> int:
    """An IntOrString of a PDB: a count, or a percentage of `total` rounded up, as Kubernetes does."""
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def disruptions_allowed(pdb: Pdb, members: Iterable[Member]) -> int:
    """status.disruptionsAllowed: healthy pods beyond what the budget must keep. Without either
    field a budget keeps every pod (maxUnavailable 0), as the API server defaults it."""
    pods = list(members)
    expected, healthy = len(pods), sum(p.healthy for p in pods)
    if pdb.min_available is not None:
        desired = scaled(pdb.min_available, expected)
    else:
        desired = expected - scaled(pdb.max_unavailable if pdb.max_unavailable is not None else 0, expected)
    return max(healthy - desired, 0)


def fully_blocking(pdb: Pdb) -> bool:
    """maxUnavailable 0 or 0%, or minAvailable 100%: no pod under it is ever evicted, so a
    consolidation simulation leaves its pods where they are."""
    if pdb.max_unavailable is not None and pdb.min_available is None:
        return pdb.max_unavailable in (0, "0%")
    return pdb.min_available == "100%"
