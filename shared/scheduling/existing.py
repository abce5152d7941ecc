"""The existing and in-flight nodes of a pass, indexed so a pod finds the first that takes it
without trying each of a large cluster's nodes.

The order is the pass's own (initialized first, then by name). A node's labels and taints do not
change within a pass, so which nodes a pod's tolerations, requirements and zones allow is found
once per such signature. Each signature's nodes sit in a max tree of their free cpu, memory and
pod slots: a pod descends to the first node with room, passing over whole runs of full nodes
(a cluster of 10,000 mostly full nodes made each pod try hundreds of them). A signature's first
pods try the nodes in turn, as before, until they have tried as many as the tree would cost to
build: a consolidation's simulation of a few pods over a whole cluster never builds one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

from shared.api.labels import ZONE_LABEL
from shared.scheduling.roomtree import EMPTY, Figures, RoomTree
from shared.scheduling.rules import ZERO, tolerated
from shared.scheduling.topology import Blocked

if TYPE_CHECKING:
    from shared.scheduling.values import NodeCapacity, PendingPod

_ANY = EMPTY  # a resource the pod does not ask for: any amount will do
_ONE = Decimal(1)  # a pod slot
SCAN_FIRST = 1.0  # nodes tried in turn per signature, as a share of all, before its tree is built


class _Tree:
    """The nodes one signature allows, in order, under a `RoomTree` of their free room."""

    __slots__ = ("indices", "room")

    def __init__(self, indices: list[int], nodes: list[NodeCapacity]) -> None:
        self.indices = indices
        self.room = RoomTree([_figures(nodes[index].free) for index in indices])

    def update(self, position: int, free: Mapping[str, Decimal]) -> None:
        self.room.set(position, *_figures(free))

    def first(self, cpu: Decimal, memory: Decimal, accept: Callable[[int], bool]) -> int | None:
        """The first node, in order, with room that `accept` takes."""
        indices = self.indices
        found = self.room.first(cpu, memory, _ONE, lambda position: accept(indices[position]))
        return None if found is None else indices[found]


def _figures(free: Mapping[str, Decimal]) -> Figures:
    return free.get("cpu", ZERO), free.get("memory", ZERO), free.get("pods", ZERO)


class NodeIndex:
    def __init__(self, nodes: list[NodeCapacity]) -> None:
        """`nodes` in the pass's order, copies the pass may take room from."""
        self.nodes = nodes
        self._trees: dict[Hashable, _Tree] = {}
        self._tried: dict[Hashable, int] = {}  # per signature without a tree yet: nodes tried so far
        self._leaves: dict[int, list[tuple[_Tree, int]]] = {}  # per node in a tree: where it sits

    def take(self, pod: PendingPod, blocked: Blocked, zones: list[str] | None) -> NodeCapacity | None:
        """The first node that takes the pod; its room is taken."""
        if not self.nodes:
            return None
        requests, nodes = pod.requests, self.nodes

        def accept(index: int) -> bool:
            node = nodes[index]
            return _has_room(node, requests) and node.name not in blocked

        key = (
            frozenset(pod.requirements.values()) if pod.requirements else None,
            tuple((t.key, t.operator, t.value, t.effect) for t in pod.tolerations),
            pod.avoid_prefer_no_schedule,
            None if zones is None else frozenset(zones),  # which zones, not their order
        )
        tree = self._trees.get(key)
        if tree is None and self._tried.get(key, 0) < SCAN_FIRST * len(nodes):
            found, tried = self._scan(pod, zones, accept)
            self._tried[key] = self._tried.get(key, 0) + tried
        else:
            tree = tree or self._tree_for(key, pod, zones)
            found = tree.first(requests.get("cpu", _ANY), requests.get("memory", _ANY), accept)
        if found is None:
            return None
        node = nodes[found]
        for name, value in requests.items():
            node.free[name] = node.free.get(name, ZERO) - value
        node.free["pods"] = node.free.get("pods", ZERO) - 1
        for holder, position in self._leaves.get(found, ()):
            holder.update(position, node.free)
        return node

    def _scan(self, pod: PendingPod, zones: list[str] | None, accept: Callable[[int], bool]) -> tuple[int | None, int]:
        """The first node that takes the pod, trying each in turn; with how many were tried."""
        for index, node in enumerate(self.nodes):
            if _allows(pod, zones, node) and accept(index):
                return index, index + 1
        return None, len(self.nodes)

    def _tree_for(self, key: Hashable, pod: PendingPod, zones: list[str] | None) -> _Tree:
        indices = [i for i, node in enumerate(self.nodes) if _allows(pod, zones, node)]
        tree = self._trees[key] = _Tree(indices, self.nodes)
        for position, index in enumerate(indices):
            self._leaves.setdefault(index, []).append((tree, position))
        return tree


def _allows(pod: PendingPod, zones: list[str] | None, node: NodeCapacity) -> bool:
    """What does not change within a pass: taints, labels, the zone."""
    return (
        tolerated(pod.tolerations, node.taints, pod.avoid_prefer_no_schedule) is None
        and pod.requirements.labels_allowed(node.labels)
        and (zones is None or node.labels.get(ZONE_LABEL) in zones)
    )


def _has_room(node: NodeCapacity, requests: Mapping[str, Decimal]) -> bool:
    free = node.free
    if free.get("pods", ZERO) < 1:
        return False
    return all(value <= free.get(name, ZERO) for name, value in requests.items())
