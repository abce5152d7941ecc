"""The existing and in-flight nodes of a pass, indexed so a pod finds the first that takes it
without trying each of a large cluster's nodes.

The order is the pass's own (initialized first, then by name). A node's labels and taints do not
change within a pass, so which nodes a pod's tolerations, requirements and zones allow is found
once per such signature; a node without room for the batch's smallest pod leaves for good; and
each signature keeps a ceiling of the free cpu and memory among its nodes (room only shrinks), so
a pod larger than that skips the scan.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from shared.api.labels import ZONE_LABEL
from shared.scheduling.rules import ZERO, tolerated
from shared.scheduling.topology import Blocked

if TYPE_CHECKING:
    from shared.scheduling.packing import NodeCapacity, PendingPod

_CEILING = ("cpu", "memory")


@dataclass(slots=True)
class _Allowed:
    """The nodes one signature allows, in order, and a ceiling on their free cpu and memory."""

    indices: list[int]
    ceiling: dict[str, Decimal]


class NodeIndex:
    def __init__(self, nodes: list[NodeCapacity], smallest: Mapping[str, Decimal]) -> None:
        """`nodes` in the pass's order, copies the pass may take room from."""
        self.nodes = nodes
        self.smallest = dict(smallest)
        self._open = [self._has_room(n, self.smallest) for n in nodes]
        self._allowed: dict[Hashable, _Allowed] = {}

    def take(self, pod: PendingPod, blocked: Blocked, zones: list[str] | None) -> NodeCapacity | None:
        """The first node that takes the pod; its room is taken."""
        if not self.nodes:
            return None
        allowed = self._allowed_for(pod, zones)
        requests = pod.requests
        if any(name in requests and requests[name] > allowed.ceiling[name] for name in _CEILING):
            return None
        indices, nodes, open_ = allowed.indices, self.nodes, self._open
        found: int | None = None
        kept: list[int] = []
        scanned = 0
        for scanned, index in enumerate(indices, 1):  # noqa: B007 - `scanned` is read below
            if not open_[index]:
                continue
            kept.append(index)
            node = nodes[index]
            if self._has_room(node, requests) and node.name not in blocked:
                found = index
                break
        else:
            allowed.ceiling = self._ceiling(kept)
        if len(kept) < scanned:  # drop the done nodes seen
            indices[:scanned] = kept
        if found is None:
            return None
        node = nodes[found]
        for name, value in requests.items():
            node.free[name] = node.free.get(name, ZERO) - value
        node.free["pods"] = node.free.get("pods", ZERO) - 1
        if not self._has_room(node, self.smallest):
            open_[found] = False
        return node

    def _allowed_for(self, pod: PendingPod, zones: list[str] | None) -> _Allowed:
        key = (
            frozenset(pod.requirements.values()) if pod.requirements else None,
            tuple((t.key, t.operator, t.value, t.effect) for t in pod.tolerations),
            None if zones is None else tuple(zones),
        )
        known = self._allowed.get(key)
        if known is None:
            indices = [
                i
                for i, node in enumerate(self.nodes)
                if self._open[i]
                and tolerated(pod.tolerations, node.taints) is None
                and pod.requirements.labels_allowed(node.labels)
                and (zones is None or node.labels.get(ZONE_LABEL) in zones)
            ]
            known = self._allowed[key] = _Allowed(indices, self._ceiling(indices))
        return known

    def _ceiling(self, indices: list[int]) -> dict[str, Decimal]:
        out = dict.fromkeys(_CEILING, Decimal(-1))
        for index in indices:
            if self._open[index]:
                free = self.nodes[index].free
                for name in _CEILING:
                    out[name] = max(out[name], free.get(name, ZERO))
        return out

    @staticmethod
    def _has_room(node: NodeCapacity, requests: Mapping[str, Decimal]) -> bool:
        free = node.free
        if free.get("pods", ZERO) < 1:
            return False
        return all(value <= free.get(name, ZERO) for name, value in requests.items())
