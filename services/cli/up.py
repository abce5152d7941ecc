"""`nodewright up`: the whole system on one machine, each service its own OS process.

Servers come from `NODEWRIGHT_DATABASE_URL` / `NODEWRIGHT_NATS_URL`, else embedded ones under
`.nodewright/` (kept between runs; an embedded nats-server gets a user per service, and each
process connects as its own; on an embedded PostgreSQL the services log in as
`nodewright_service`, a member of the writer role). The log is migrated, then the sim, the relay, the watcher and the
scheduler start with the same accelerated clock (the scenario's start, `--speed` times faster)
and their own health and metrics ports; each writes its log to `.nodewright/logs/<service>.log`
(JSON lines unless `--log-format text`, which they inherit through NODEWRIGHT_LOG_FORMAT). A live
view shows pools, nodes, pending pods and the newest events. Ctrl-C (or `--for`) stops every
process, then the embedded servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from services.cli.eventlog import migrate
from shared.bus.service import PORT_FILE_ENV
from shared.clock import AcceleratedClock
from shared.config import Settings
from shared.redaction import redact
from shared.runtime import loop
from shared.runtime.bus import LocalBus, local_bus
from shared.runtime.clockfile import write_clock
from shared.runtime.servers import local_database_url
from shared.store.eventstore import EventStore
from shared.store.migrate import WRITER, member_login

STOP_SECONDS = 15.0
REFRESH_SECONDS = 0.5
LISTED = 8


@dataclass
class Child:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    port_file: Path


class ChildExited(RuntimeError):
    pass


def up(
    config: Settings,
    scenario: Path | None,
    speed: float,
    *,
    run_for: float | None = None,
    live: bool = True,
    base_port: int | None = None,
    console: Console | None = None,
    then: Callable[[str], Coroutine[Any, Any, Any]] | None = None,
) -> tuple[dict[str, Any], Any]:
    """Run until Ctrl-C or `run_for` wall seconds; the last view of the system, and what `then`
    (given the database URL, once every service has stopped and before the servers do) returned."""
    console = console or Console()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops all, as Ctrl-C does
    try:
        return _up(config, scenario, speed, run_for, live, base_port, console, then)
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
    then: Callable[[str], Coroutine[Any, Any, Any]] | None,
) -> tuple[dict[str, Any], Any]:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    scenario = scenario or _empty_scenario(config.data_dir)
    start = _scenario_start(scenario)
    with local_database_url(config) as database_url, local_bus(config) as bus:
        console.print(loop.run(migrate(database_url)))
        services_url = database_url
        if not config.database_url:  # embedded: the services log in as writers, never as the owner
            services_url = loop.run(member_login(database_url, "nodewright_service", WRITER))
        clock = AcceleratedClock(start, speed)
        env = {**os.environ, "NODEWRIGHT_DATABASE_URL": services_url, **clock.environment()}
        shared = write_clock(config.data_dir, clock)
        with contextlib.ExitStack() as cleanup, _children(config.data_dir, scenario, env, bus, base_port) as children:
            cleanup.callback(lambda: shared.unlink(missing_ok=True))
            for child in children:
                console.print(f"started {child.name} (pid {child.process.pid}), health and metrics on :{child.port}")
            view = loop.run(_watch(database_url, children, clock, run_for, live, console))
        return view, (loop.run(then(database_url)) if then is not None else None)


@contextlib.contextmanager
def _children(
    data_dir: Path, scenario: Path, env: dict[str, str], bus: LocalBus, base_port: int | None
) -> Iterator[list[Child]]:
    """The services, each in its own session (a Ctrl-C at the terminal reaches only `up`, which
    stops them in order) and as its own NATS user. The sim first: the others talk to it as soon
    as they start; the relay next, which makes the stream the others consume."""
    commands = {
        "sim": ["-m", "services.sim", "--scenario", str(scenario)],
        "relay": ["-m", "services.relay"],
        "watcher": ["-m", "services.watcher"],
        "scheduler": ["-m", "services.scheduler"],
        "termination": ["-m", "services.termination"],
        "disruption": ["-m", "services.disruption"],
    }
    clean = {k: v for k, v in env.items() if not k.startswith(("NODEWRIGHT_NATS_", "NODEWRIGHT_DEPLOYMENT"))}
    logs = data_dir / "logs"
    logs.mkdir(exist_ok=True)
    ports = data_dir / "ports"
    ports.mkdir(exist_ok=True)
    children: list[Child] = []
    try:
        for index, (name, args) in enumerate(commands.items()):
            port = base_port + index if base_port is not None else 0
            log = logs / f"{name}.log"
            said = ports / f"{name}.port"
            said.unlink(missing_ok=True)
            with log.open("ab") as out:
                process = subprocess.Popen(
                    [sys.executable, *args, "--port", str(port)],
                    env={**clean, **bus.acting_as(name).environment(), PORT_FILE_ENV: str(said)},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            children.append(Child(name, port, process, log, said))
            if name == "sim":
                _wait_ready(children[-1])
        for child in children:
            _wait_port(child)
        yield children
    finally:
        _stop(children)


def _wait_port(child: Child, timeout: float = 60.0) -> None:
    """The port the child bound, from the file it writes once it listens."""
    deadline = time.monotonic() + timeout
    while not child.port:
        if child.process.poll() is not None:
            raise ChildExited(f"{child.name} exited with {child.process.returncode}:\n{_tail(child)}")
        if time.monotonic() > deadline:
            raise ChildExited(f"{child.name} did not listen after {timeout:.0f} s:\n{_tail(child)}")
        with contextlib.suppress(OSError, ValueError):
            child.port = int(child.port_file.read_text())
            break
        time.sleep(0.05)


def _wait_ready(child: Child, timeout: float = 60.0) -> None:
    import urllib.error
    import urllib.request

    _wait_port(child, timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.process.poll() is not None:
            raise ChildExited(f"{child.name} exited with {child.process.returncode}:\n{_tail(child)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{child.port}/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise ChildExited(f"{child.name} was not ready after {timeout:.0f} s:\n{_tail(child)}")


def _tail(child: Child) -> str:
    """The end of a child's log, for the error that says it died: its lines are masked already,
    but what it printed before its logging was set up is not."""
    return redact(child.log.read_text(errors="replace")[-2000:])


def _stop(children: list[Child]) -> None:
    """In the reverse of the order they started (the sim, which the others call, last): SIGTERM,
    then a wait; whatever is still running after STOP_SECONDS is killed."""
    for child in reversed(children):
        if child.process.poll() is None:
            child.process.terminate()
        try:
            child.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


async def _watch(
    database_url: str,
    children: list[Child],
    clock: AcceleratedClock,
    run_for: float | None,
    live: bool,
    console: Console,
) -> dict[str, Any]:
    """Refresh the view until Ctrl-C, `run_for`, or a child that dies (its log's tail is shown)."""
    store = EventStore.connect(database_url, pool_size=1)  # its driver settings: password, TLS...
    deadline = None if run_for is None else time.monotonic() + run_for
    view: dict[str, Any] = {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http,
            store.driver_connection() as conn,
        ):
            with (
                Live(console=console, auto_refresh=False, transient=False)
                if live
                else contextlib.nullcontext() as screen
            ):
                while deadline is None or time.monotonic() < deadline:
                    view = await _view(conn, http, children, clock)
                    if screen is not None:
                        screen.update(_render(view), refresh=True)
                    dead = [c for c in children if c.process.poll() is not None]
                    if dead:
                        raise ChildExited(f"{dead[0].name} exited with {dead[0].process.returncode}:\n{_tail(dead[0])}")
                    await asyncio.sleep(REFRESH_SECONDS)
    finally:
        await store.close()
    if not live:
        console.print(_render(view))
    return view


async def _view(conn: asyncpg.Connection, http: aiohttp.ClientSession, children: list[Child], clock: Any) -> dict:
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
    processes = []
    for child in children:
        try:
            async with http.get(f"http://127.0.0.1:{child.port}/readyz") as response:
                ready = "ready" if response.status == 200 else "not ready"
        except (aiohttp.ClientError, TimeoutError):
            ready = "starting"
        processes.append({"name": child.name, "pid": child.process.pid, "port": child.port, "status": ready})
    return {
        "now": clock.now().isoformat(timespec="seconds"),
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
        "processes": processes,
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
    processes = Table("process", "pid", "port", "status", title="processes")
    for p in view.get("processes", []):
        processes.add_row(p["name"], str(p["pid"]), str(p["port"]), p["status"])
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


def _scenario_start(path: Path) -> datetime:
    from shared.runtime.scenarios import load_scenario

    return load_scenario(path).start
