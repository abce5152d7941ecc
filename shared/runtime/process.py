"""Running one service as an OS process: stop cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from shared import crashes
from shared.adapters.sim import SimClient
from shared.bus.connection import BusSettings
from shared.config import NODE_OVERLAY, Settings, settings
from shared.outages import OUTAGES, Backoff, unless_stopping
from shared.ports.cloud import CloudError, CloudProvider
from shared.ports.cluster import Cluster
from shared.runtime import loop
from shared.store.eventstore import EventStore

if TYPE_CHECKING:
    from shared.adapters.aws.nodeclasses import NodeClassObjects
    from shared.adapters.aws.session import AwsSettings, ClientFactory

log = logging.getLogger("nodewright")


def serve(main: Callable[[asyncio.Event], Awaitable[None]], name: str | None = None) -> None:
    """Run `main(stopping)` until it returns; a signal sets `stopping` so it can finish its work.
    `name`, the service's, is what the test hook that makes it crash names (`crashes.crash_hook`)."""
    after = crashes.crash_hook(name) if name else None

    async def run() -> None:
        stopping = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stopping.set)
        if name is None or after is None:
            await main(stopping)
        else:
            await _crash_after(main(stopping), name, after)

    loop.run(run())


async def _crash_after(work: Awaitable[None], name: str, after: float) -> None:
    """The test hook: `work` until `after` seconds past the start of the clock (which `up` holds
    until every service is ready) or of this process, whichever is later; then an exception
    nothing catches, as a bug's would be."""
    task = asyncio.ensure_future(work)
    clock = settings().clock()
    while getattr(clock, "origin", 0) is None and not task.done():  # a gated clock, not open yet
        await asyncio.sleep(0.1)
    await asyncio.wait({task}, timeout=after)
    if task.done():
        return task.result()
    raise crashes.CrashOnPurpose(crashes.crash_message(name, after))


class Service(Protocol):
    async def run(self, stopping: asyncio.Event) -> None: ...


@dataclass(frozen=True)
class Connected:
    """What a service reaches the world through: the cluster (the Kubernetes API) and the cloud
    (NODEWRIGHT_CLOUD: the sim's, over NATS, or EC2's)."""

    cluster: Cluster
    cloud: CloudProvider


def serve_connected(
    name: str, build: Callable[[EventStore, Connected, BusSettings, Settings], Service], *, plans: bool = False
) -> None:
    """Run a service that needs the event store, the cluster (its kubeconfig: NODEWRIGHT_KUBECONFIG,
    else KUBECONFIG, else in-cluster) and the cloud, as its own NATS identity and its own
    Kubernetes identity, closing all when it stops. A bus not there yet is waited for. With
    NODEWRIGHT_SIGNING_KEY, every event it appends is signed."""
    config = settings()
    database_url = config.database_url
    if not database_url or not config.nats_url:
        crashes.give_up(f"the {name} needs NODEWRIGHT_DATABASE_URL and NODEWRIGHT_NATS_URL", 1)
    bus = BusSettings.from_settings(config)

    async def run(stopping: asyncio.Event) -> None:
        # here, not at the top: kubernetes_asyncio loads its whole client (about 40 MB), which the
        # relay and the sim, served by this module too, never use
        from shared.adapters.kube import KubeCluster, KubeconfigError

        try:
            cluster = await KubeCluster.connect(
                str(config.kubeconfig) if config.kubeconfig else None,
                context=config.kube_context,
                clock=config.clock(),
                overlays=config.gates[NODE_OVERLAY],
            )
        except KubeconfigError as exc:
            crashes.give_up(f"the {name} cannot reach the Kubernetes API: {exc}", 2)
        sim: SimClient | None = None
        if config.cloud == "aws":
            cloud: CloudProvider = _aws_provider(config, cluster, name)
            if plans:  # a service that plans with the instance types has them before it says ready
                await _warm(cloud, name)
        else:
            sim = await _sim_client(bus, name, stopping)
            if sim is None:
                await cluster.close()
                return
            cloud = sim
        store = EventStore.connect(database_url, pool_size=4, signing_key=config.signing_key_bytes())
        try:
            await build(store, Connected(cluster, cloud), bus, config).run(stopping)
        finally:
            if sim is not None:
                await sim.close()
            elif hasattr(cloud, "close"):
                await cloud.close()
            await cluster.close()
            await store.close()

    serve(run, name)


def aws_configuration(name: str) -> tuple[AwsSettings, ClientFactory]:
    """AWS's standard configuration (AWS_REGION, AWS_ENDPOINT_URL, the usual credential chain,
    which is never read here) and a client factory on it; a process without it gives up, saying
    which setting is missing. Imported here, not at the top: botocore loads only with aws."""
    from shared.adapters.aws.session import AwsConfigError, AwsSettings, client_factory

    try:
        aws = AwsSettings.from_env()
    except AwsConfigError as exc:
        crashes.give_up(f"the {name} cannot use NODEWRIGHT_CLOUD=aws: {exc}", 1)
    return aws, client_factory(aws)


def _aws_provider(config: Settings, cluster: NodeClassObjects, name: str) -> CloudProvider:
    """EC2 as the cloud: the catalog, EC2NodeClasses read through the Kubernetes API."""
    from shared.adapters.aws.catalog import AwsCatalog
    from shared.adapters.aws.nodeclasses import KubeNodeClasses
    from shared.adapters.aws.provider import AwsProvider
    from shared.aws.cluster import ClusterBootstrap

    aws, clients = aws_configuration(name)
    clock = config.clock()
    catalog = AwsCatalog(clients, aws.region, clock.now)
    log.info("%s: the cloud is EC2 in %s for cluster %s", name, aws.region, config.cluster_name)
    bootstrap = ClusterBootstrap(
        config.cluster_name or "",
        endpoint=config.cluster_endpoint,
        ca_bundle=config.cluster_ca_bundle,
        dns_ip=config.cluster_dns_ip,
        cidr=config.cluster_cidr,
    )
    return AwsProvider(
        clients, catalog, KubeNodeClasses(cluster), config.cluster_name or "", clock.now, bootstrap=bootstrap
    )


async def _warm(cloud: CloudProvider, name: str) -> None:
    """EC2's instance types fetched before the service starts (and says it is ready): thousands
    of types take seconds to describe, which a first pass would otherwise wait for while the
    scenario's clock runs. One that fails is fetched again at its first use."""
    try:
        await cloud.instance_types()
    except CloudError as exc:
        log.warning("%s: EC2's instance types not fetched yet: %s", name, exc)


async def _sim_client(bus: BusSettings, name: str, stopping: asyncio.Event) -> SimClient | None:
    backoff = Backoff()
    while not stopping.is_set():
        try:
            return await unless_stopping(SimClient.connect(bus, name), stopping)
        except OUTAGES as exc:
            log.warning("%s: NATS not reachable yet (%r); trying again", name, exc)
            await backoff.wait(stopping)
    return None
