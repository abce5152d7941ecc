"""Service processes for end-to-end tests: started as `nodewright up` starts them, watched
through their metrics, killed with SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cli.local_cluster import LocalCluster
from shared.bus.service import PORT_FILE_ENV
from shared.runtime.servers import free_tcp_port
from shared.store.eventstore import EventStore


def pids(output: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"started (\w+) \(pid (\d+)\)", output)}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    port_file: Path
    _port: int = 0

    @property
    def port(self) -> int:
        """The health port the service bound (0 until it listens): it is started with port 0 and
        says which it got, so no port chosen ahead can be taken meanwhile."""
        if not self._port:
            with contextlib.suppress(OSError, ValueError):
                self._port = int(self.port_file.read_text())
        return self._port

    def metric(self, name: str) -> float | None:
        if not self.port:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        found = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        return float(found.group(1)) if found else None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


class System:
    """Service processes of one deployment, as `nodewright up` starts them: on a bus set up
    first by `nodewright bus setup`, as an operator would (no service makes a stream or a
    consumer), with the same settings (a termination ack wait of its own)."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, env
        self.services: list[Service] = []
        self.cluster = LocalCluster.create(
            tmp / "cluster", free_tcp_port(), env.get("NODEWRIGHT_DEPLOYMENT", "default")
        )
        """The sim's Kubernetes API, with a token for each service and the user."""
        if env.get("NODEWRIGHT_NATS_URL"):
            done = subprocess.run(
                [str(Path(sys.executable).parent / "nodewright"), "bus", "setup"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr

    def start(self, name: str, *args: str) -> Service:
        log = self.tmp / f"{name}-{len(self.services)}.log"
        said = log.with_suffix(".port")
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", f"services.{name}", *args, "--port", "0"],
                env={**self.env, **self.cluster.environments().get(name, {}), PORT_FILE_ENV: str(said)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        service = Service(name, process, log, said)
        self.services.append(service)
        return service

    def stop(self) -> None:
        for service in reversed(self.services):
            if service.process.poll() is None:
                service.process.terminate()
        for service in self.services:
            try:
                service.process.wait(20)
            except subprocess.TimeoutExpired:
                service.process.kill()


def cli_environment(
    tmp: Path, database_url: str | None = None, nats_url: str | None = None, deployment: str | None = None
) -> dict[str, str]:
    """A user's environment for `nodewright`: a data dir under `tmp`; the servers and deployment
    given, else the embedded servers and the default deployment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env["NODEWRIGHT_DATA_DIR"] = str(tmp / "data")
    given = {"DATABASE_URL": database_url, "NATS_URL": nats_url, "DEPLOYMENT": deployment}
    return env | {f"NODEWRIGHT_{k}": v for k, v in given.items() if v}


def environment(tmp: Path, database_url: str, nats_url: str, deployment: str, start: str) -> dict[str, str]:
    """A service's environment, as `nodewright up` gives it: with the shared clock."""
    return cli_environment(tmp, database_url, nats_url, deployment) | {
        "NODEWRIGHT_CLOCK_START": start,
        "NODEWRIGHT_CLOCK_SPEED": "60",
        "NODEWRIGHT_CLOCK_ORIGIN": str(time.time()),
    }


async def bound_pods(store: EventStore, workload: str = "web") -> int:
    """Pods of the workload whose latest fact says they run."""
    async with store.driver_connection() as raw:
        rows = await raw.fetch(
            "SELECT DISTINCT ON (stream_id) type FROM events WHERE stream_id LIKE $1 ORDER BY stream_id, version DESC",
            f"pod-%/{workload}-%",
        )
    return sum(1 for r in rows if r["type"] == "PodBound")


async def wait_for(condition, seconds: float, what: str) -> float:
    started = time.monotonic()
    while not await condition():
        assert time.monotonic() - started < seconds, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


def run_log_url(server_url: str, run: str) -> str:
    """The database `nodewright run` made for a run, on the server `server_url` reaches."""
    from shared.runtime.runs import database_url

    return database_url(server_url, run)


async def drop_run_log(url: str) -> None:
    """Drop a run's database (tests leave no run behind on a shared server)."""
    from sqlalchemy.engine import make_url

    from shared.runtime.runs import drop

    await drop(make_url(url).set(database="postgres").render_as_string(hide_password=False), make_url(url).database)


def stop_command(process: subprocess.Popen[str]) -> None:
    """Stop a `nodewright up`/`run` a test gave up on: SIGTERM first, which `up` takes as Ctrl-C
    and stops its services (each in a session of its own, which a SIGKILL of `up` would orphan);
    SIGKILL only if it does not end."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
