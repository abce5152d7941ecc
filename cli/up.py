"""`nodewright up`: the whole system on one machine, each service its own OS process.

Servers come from `NODEWRIGHT_DATABASE_URL` / `NODEWRIGHT_NATS_URL`, else embedded ones under
`.nodewright/` (kept between runs; an embedded nats-server gets a user per service, and each
process connects as its own; on an embedded PostgreSQL the services log in as
`nodewright_service`, a member of the writer role). The log is migrated, then the sim, the
relay, the watcher, the scheduler, termination and disruption start with the same accelerated
clock (the scenario's start, `--speed` times faster), held at the start until every one is
ready, and their own health and metrics ports; each writes its log to
`.nodewright/logs/<service>.log` (JSON lines unless `--log-format text`, which they inherit
through NODEWRIGHT_LOG_FORMAT). A live view shows pools, nodes, pending pods and the newest
events. Ctrl-C (or `--for`) stops every process, then the embedded servers.

A process that dies is started again (`children.supervise`); the view says why it died and when
it is in a crash loop, and the last view carries `restarts` (per service: how often, and why),
which `up` and `run` report at their end: a run in which a process died is not a clean run.
Configured servers that do not answer stop `up` before it starts anything (exit 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cli import children as children_of
from cli import cloud
from cli.children import Child, ChildExited
from cli.database import reach_configured
from cli.local_cluster import LocalCluster
from cli.migrate import migrate
from shared.bus.setup import set_up
from shared.bus.streams import forget_sim_world
from shared.clock import AcceleratedClock
from shared.config import Settings
from shared.events.contracts import NodePoolEvent
from shared.outages import OUTAGES
from shared.runtime import loop, runs
from shared.runtime.bus import LocalBus, local_bus
from shared.runtime.clockfile import write_clock
from shared.runtime.postgres import local_database_url
from shared.runtime.scenarios import load_scenario
from shared.store.eventstore import EventStore
from shared.store.migrate import WRITER, member_login

GATE = "clock-origin"
"""The file the processes' held clock waits on (`AcceleratedClock.open`)."""
REFRESH_SECONDS = 0.5
POOLS_SECONDS = 30.0
"""How long the clock waits for the watcher to record the scenario's NodePools."""
LISTED = 8


def up(
    config: Settings,
    scenario: Path | None,
    speed: float,
    *,
    run_for: float | None = None,
    live: bool = True,
    base_port: int | None = None,
    console: Console | None = None,
    then: Callable[[str, dict[str, Any]], Coroutine[Any, Any, Any]] | None = None,
    run: tuple[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], Any]:
    """Run until Ctrl-C or `run_for` wall seconds; the last view of the system (with `restarts`,
    and `gave_up` when a process kept dying), and what `then` (given the database URL and that
    view, once every service has stopped and before the servers do) returned. With `run` (a
    name and its description), the log is a new database of that name (`shared.runtime.runs`),
    not the server's own; Ctrl-C then ends it without `then`."""
    console = console or Console()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops all, as Ctrl-C does
    try:
        return _up(config, scenario, speed, run_for, live, base_port, console, then, run)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _up(
    config: Settings,
    scenario: Path | None,
    speed: float,
    run_for: float | None,
    live: bool,
    base_port: int | None,
    console: Console,
    then: Callable[[str, dict[str, Any]], Coroutine[Any, Any, Any]] | None,
    run: tuple[str, dict[str, Any]] | None,
) -> tuple[dict[str, Any], Any]:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    scenario = scenario or _empty_scenario(config.data_dir)
    played = load_scenario(scenario, gates=config.gates)
    said = cloud.prepare(config, played)
    if said is not None:
        console.print(said, soft_wrap=True, markup=False)
    with local_database_url(config) as database_url, local_bus(config) as bus:
        reach_configured(config, bus.acting_as("cli"))
        if run is not None:
            database_url = loop.run(runs.create(database_url, *run))
            console.print(f"run {run[0]}: a log of its own")
        console.print(loop.run(migrate(database_url)))
        if config.nats_url:  # an embedded server is set up as it starts
            made = loop.run(
                set_up(bus.acting_as("setup"), replicas=config.stream_replicas, ack_wait=config.termination_ack_wait)
            )
            console.print(f"bus set up: streams {', '.join(made.streams)}")
        services_url = database_url
        if not config.database_url:  # embedded: the services log in as writers, never as the owner
            services_url = loop.run(member_login(database_url, "nodewright_service", WRITER))
        gate = config.data_dir / GATE
        gate.unlink(missing_ok=True)
        clock = AcceleratedClock(played.start, speed, gate=gate)
        world = f"{run[0] if run else 'up'}-{secrets.token_hex(4)}"  # the sim resumes it after a crash only
        env = {
            **os.environ,
            "NODEWRIGHT_DATABASE_URL": services_url,
            "NODEWRIGHT_SIM_WORLD": world,
            **clock.environment(),
        }
        cluster = LocalCluster.prepare(config, base_port)
        told = cluster.environments()
        told["sim"]["NODEWRIGHT_SIM_NODEPOOLS"] = "api"  # the scenario's NodePools come through the API
        view: dict[str, Any] = {}
        try:
            with (
                contextlib.ExitStack() as cleanup,
                children_of.started(config.data_dir, scenario, env, bus, base_port, told) as children,
            ):
                for child in children:
                    console.print(
                        f"started {child.name} (pid {child.process.pid}), health and metrics on :{child.port}"
                    )
                console.print(f"the Kubernetes API on {cluster.server}", soft_wrap=True, markup=False)
                console.print(f"export KUBECONFIG={cluster.user_kubeconfig}", soft_wrap=True, markup=False)
                classes = [nodeclass.to_dict() for nodeclass in played.nodeclasses]
                if classes:  # before the pools that name them
                    loop.run(cluster.apply(classes))
                    names = ", ".join(str(c["metadata"]["name"]) for c in classes)
                    console.print(f"applied EC2NodeClasses {names} through the Kubernetes API", soft_wrap=True)
                overlays = [overlay.to_dict() for overlay in played.nodeoverlays]
                if overlays:  # served whatever the gate; acted on only while it is on
                    loop.run(cluster.apply(overlays))
                    names = ", ".join(str(o["metadata"]["name"]) for o in overlays)
                    console.print(f"applied NodeOverlays {names} through the Kubernetes API", soft_wrap=True)
                pools = [pool.to_dict() for pool in played.nodepools]
                if pools:
                    console.print(loop.run(_apply_nodepools(cluster, pools, database_url)), soft_wrap=True)
                clock.open()  # every process is ready: the scenario's time starts now, for all of them
                shared = write_clock(config.data_dir, clock)
                cleanup.callback(lambda: (shared.unlink(missing_ok=True), gate.unlink(missing_ok=True)))
                try:
                    view = loop.run(_watch(database_url, children, clock, run_for, live, console, view))
                except KeyboardInterrupt:
                    if then is not None:
                        raise
            view["restarts"] = children_of.restarts(children)  # stopped: their last ends counted too
        finally:  # every process has stopped: nothing will resume this run's world
            _forget_world(bus, world, console)
        return view, (loop.run(then(database_url, view)) if then is not None else None)


async def _apply_nodepools(cluster: LocalCluster, pools: list[dict[str, Any]], database_url: str) -> str:
    """The scenario's NodePools applied through the API, as its user would, then waited for in
    the log (the watcher records each) so the clock starts with them known, as it would have
    with a world that held them from the start."""
    names = [str(pool["metadata"]["name"]) for pool in pools]
    streams = [NodePoolEvent.stream_of(name) for name in names]
    store = EventStore.connect(database_url, pool_size=1)
    try:
        before = [await store.stream_version(stream) for stream in streams]
        await cluster.apply(pools)
        deadline = time.monotonic() + POOLS_SECONDS
        while time.monotonic() < deadline:
            now = [await store.stream_version(stream) for stream in streams]
            if all(n > b for n, b in zip(now, before, strict=True)):
                return f"applied NodePools {', '.join(names)} through the Kubernetes API"
            await asyncio.sleep(0.05)
    finally:
        await store.close()
    return f"applied NodePools {', '.join(names)}; the watcher had not recorded them after {POOLS_SECONDS:.0f} s"


def _forget_world(bus: LocalBus, world: str, console: Console) -> None:
    try:
        loop.run(forget_sim_world(bus.acting_as("sim"), world))
    except OUTAGES as exc:
        console.print(f"the sim's journal of world {world} was kept: {exc!r}")


async def _watch(
    database_url: str,
    children: list[Child],
    clock: AcceleratedClock,
    run_for: float | None,
    live: bool,
    console: Console,
    view: dict[str, Any],
) -> dict[str, Any]:
    """Refresh `view` until Ctrl-C or `run_for`, restarting any process that dies
    (`children.supervise`); one that keeps dying ends the watch early (`gave_up`). A database
    that stops answering is waited for, and said."""
    store = EventStore.connect(database_url, pool_size=1)  # its driver settings: password, TLS...
    deadline = None if run_for is None else time.monotonic() + run_for
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
            with (
                Live(console=console, auto_refresh=False, transient=False)
                if live
                else contextlib.nullcontext() as screen
            ):
                while deadline is None or time.monotonic() < deadline:
                    try:
                        children_of.supervise(children, lambda text: console.print(text, soft_wrap=True, markup=False))
                    except ChildExited as exc:
                        view["gave_up"] = str(exc).split("\n", 1)[0]
                        console.print(str(exc), soft_wrap=True, markup=False, highlight=False, style="bold red")
                        break
                    seen = await _view(store, http, children, clock, view)
                    view.clear()
                    view.update(seen)
                    if screen is not None:
                        screen.update(_render(view), refresh=True)
                    await asyncio.sleep(REFRESH_SECONDS)
    finally:
        await store.close()
    if not live:
        console.print(_render(view))
    return view


async def _view(
    store: EventStore, http: aiohttp.ClientSession, children: list[Child], clock: Any, last: dict[str, Any]
) -> dict:
    """What the log says now, and each process's readiness; while the database does not answer,
    the last view with the reason."""
    processes = [await _process(http, child) for child in children]
    try:
        async with store.driver_connection() as conn:
            view = await _from_log(conn)
    except (*OUTAGES, asyncpg.PostgresError) as exc:  # as a service, a restart in mid-statement too
        view = {**last, "database": f"not answering ({type(exc).__name__}); waiting"}
    return {**view, "now": clock.now().isoformat(timespec="seconds"), "processes": processes}


async def _process(http: aiohttp.ClientSession, child: Child) -> dict[str, Any]:
    status = child.status
    if status == "running":
        try:
            async with http.get(f"http://127.0.0.1:{child.port}/readyz") as response:
                status = "ready" if response.status == 200 else _not_ready(await response.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            status = "starting"
    return {
        "name": child.name,
        "pid": child.process.pid,
        "port": child.port,
        "status": status,
        "restarts": child.restarts,
        "last_exit": child.last_reason,
    }


def _not_ready(body: Any) -> str:
    """`not ready`, with the first reason /readyz gave (a crash loop comes first)."""
    reasons = body.get("reasons") if isinstance(body, dict) else None
    return f"not ready: {reasons[0]}" if reasons else "not ready"


async def _from_log(conn: asyncpg.Connection) -> dict[str, Any]:
    pools = await conn.fetch(
        "SELECT nodepool, nodes, in_flight, resources::text, (spec -> 'spec' -> 'limits')::text AS limits"
        " FROM nodepool_counters ORDER BY nodepool"
    )
    latest = await latest_states(conn)
    nodes = [
        {
            "name": r["stream_id"].removeprefix("node-"),
            "nodepool": r["nodepool"] or "-",
            "state": "initialized" if r["type"] == "NodeInitialized" else "registered",
        }
        for r in latest
        if r["stream_id"].startswith("node-") and r["type"] != "NodeDeleted"
    ]
    pending = [r["stream_id"].removeprefix("pod-") for r in latest if r["type"] == "PodPending"]
    recent = await conn.fetch("SELECT position, type, stream_id FROM events ORDER BY position DESC LIMIT 8")
    return {
        "events": recent[0]["position"] if recent else 0,
        "nodes": nodes,
        "pending_pods": pending,
        "nodepools": [
            {
                "name": p["nodepool"],
                "nodes": p["nodes"],
                "in_flight": p["in_flight"],
                "resources": p["resources"],
                "limits": p["limits"] or "{}",
            }
            for p in pools
        ],
        "recent": [{"position": r["position"], "type": r["type"], "stream": r["stream_id"]} for r in recent],
    }


async def latest_states(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """The newest fact of every node and pod stream: what the watcher last saw of each."""
    return await conn.fetch(
        "SELECT DISTINCT ON (stream_id) stream_id, type, data ->> 'nodepool' AS nodepool FROM events"
        " WHERE stream_id LIKE 'node-%' OR stream_id LIKE 'pod-%' ORDER BY stream_id, version DESC"
    )


def _render(view: dict[str, Any]) -> Group:
    nodes, pending = view.get("nodes", []), view.get("pending_pods", [])
    head = Table.grid(padding=(0, 2))
    head.add_row(
        f"[bold]simulated time[/] {view.get('now', '-')}",
        f"nodes {len(nodes)}",
        f"pending pods {len(pending)}",
        f"last position {view.get('events', 0)}",
    )
    if view.get("database"):
        head.add_row(f"[bold red]database {view['database']}[/]", "", "", "")
    processes = Table("process", "pid", "port", "status", "restarts", "last exit", title="processes")
    for p in view.get("processes", []):
        processes.add_row(  # a reason is plain text, never markup
            p["name"], str(p["pid"]), str(p["port"]), Text(p["status"]), str(p["restarts"]), Text(p["last_exit"] or "-")
        )
    pools = Table("nodepool", "nodes", "in flight", "resources", "limits", title="nodepools")
    for p in view.get("nodepools", []):
        pools.add_row(p["name"], str(p["nodes"]), str(p["in_flight"]), p["resources"], p["limits"])
    node_table = Table("node", "nodepool", "state", title=f"nodes ({len(nodes)})")
    for n in nodes[:LISTED]:
        node_table.add_row(n["name"], n["nodepool"], n["state"])
    pods = Table("pending pod", title=f"pending pods ({len(pending)})")
    for name in pending[:LISTED]:
        pods.add_row(name)
    recent = Table("position", "event", "stream", title="recent events")
    for r in view.get("recent", []):
        recent.add_row(str(r["position"]), r["type"], r["stream"])
    return Group(head, processes, pools, node_table, pods, recent)


def _empty_scenario(data_dir: Path) -> Path:
    """No --scenario: an empty world starting now (pools and pods come from a later scenario)."""
    path = data_dir / "empty-scenario.yaml"
    document = {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "empty"},
        "spec": {"start": datetime.now(UTC).replace(microsecond=0).isoformat(), "duration": "24h"},
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path
