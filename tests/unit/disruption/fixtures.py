"""A small cluster for the disruption core's tests: a catalog of four sizes, one pool, nodes with
free room, candidates as the consolidation and drift methods take them."""

from __future__ import annotations

from decimal import Decimal

from shared.disruption.simulation import ClusterView, Movable, Move
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import NodeCapacity, PendingPod, PoolTemplate

GI = Decimal(2**30)


def instance(cpu: int, price: float) -> InstanceOption:
    resources = {"cpu": Decimal(cpu), "memory": cpu * 4 * GI, "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": f"m{cpu}"}
    return InstanceOption(f"m{cpu}", resources, resources, labels, (Offer("a", "on-demand", price),))


CATALOG = (instance(1, 1.0), instance(2, 2.0), instance(4, 4.0), instance(8, 8.0))
POOLS = (PoolTemplate("a", Requirements()),)


def pod(name: str, cpu: str = "1") -> PendingPod:
    return PendingPod(name, {"cpu": Decimal(cpu), "memory": GI})


def node(name: str, free_cpu: str, *, initialized: bool = True) -> NodeCapacity:
    return NodeCapacity(
        name,
        {"karpenter.sh/nodepool": "a"},
        [],
        {"cpu": Decimal(free_cpu), "memory": 32 * GI, "pods": Decimal(100)},
        initialized,
    )


def movable(name: str, pods: tuple[PendingPod, ...], price: float, size: int = 8) -> Movable:
    return Movable(Move(name, name, pods), "a", price, "on-demand", f"m{size}")


def cluster(*nodes: NodeCapacity, **fields) -> ClusterView:
    return ClusterView(tuple(nodes), POOLS, CATALOG, **fields)
