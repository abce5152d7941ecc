"""End to end: a burst of pods through the whole system, every service its own process.

The services start as `nodewright up` starts them (`cli.children.started`: the sim, the
relay, the watcher, the scheduler, termination, disruption), on the real-time clock (speed 1, so
every figure is wall seconds). The scenario, written here: one NodePool shaped like upstream's
perf suite's (instance sizes under 32 vCPU, consolidation off), and a workload of 1-vCPU pods
scaled from 0 to `--pods` at a timeline instant after every service is ready. From the log's
commit times (`recorded_at`: PostgreSQL's clock_timestamp() as the row is written, a round trip
at most before its commit; a server on another host must keep this one's time) and the
scheduler's own pass instant (its claims' `occurred_at` on the shared clock):

- burst -> durable: from the sim's scale to the last NodeClaimCreated committed; and the same
  after the batch window closed (the goal, <= 3 s), the window being the scheduler's wait from
  the burst until no new pod came for NODEWRIGHT_BATCH_IDLE_DURATION;
- burst -> bound: until the watcher has recorded every pod bound in the sim (this includes the
  sim's launch and registration latencies, 30 s and 20 s unless told: a cloud's, as upstream's
  2-minute bound includes one);
- the services' resident memory, sampled every 0.1 s: each one's peak, and the peak of the sum
  (RSS, as the goal counts it; PSS too, which shares libraries out fairly). The servers
  (PostgreSQL, nats-server) are not counted, as upstream's figure is one Karpenter process alone.

Run: `python -m benchmarks.e2e [--pods 1000] [--runs 1] [--warmup 20] [--launch-latency 30s]
[--registration-latency 20s] [--logs DIR]`: embedded servers in a temporary directory unless
NODEWRIGHT_DATABASE_URL / NODEWRIGHT_NATS_URL are set. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from benchmarks._db import bench_database
from cli import children as children_of
from cli.local_cluster import LocalCluster
from shared.api.duration import parse_duration
from shared.bus.setup import set_up
from shared.clock import AcceleratedClock
from shared.config import Settings, driver_params, settings
from shared.runtime.bus import local_bus
from shared.runtime.servers import free_tcp_port

UPSTREAM_SCALE_OUT_S = 120.0
"""Upstream's suite bound for a 1,000-pod scale-out, as issue 22 cites it."""
UPSTREAM_PROCESS_MB = 260.0
"""Upstream's suite bound on one Karpenter process's memory, as issue 22 cites it."""
GOAL_AFTER_WINDOW_S = 3.0
GOAL_RSS_MB = 400.0
WORKLOAD = "web"
MB = 1_000_000
SAMPLE_SECONDS = 0.1
POLL_SECONDS = 0.25
SERVICES = ("sim", "relay", "watcher", "scheduler", "termination", "disruption")


def scenario(pods: int, start: datetime, burst_after: float, launch: str, registration: str) -> dict[str, Any]:
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "burst"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "default"},
                    "requirements": [{"key": "sim.nodewright.dev/instance-cpu", "operator": "Lt", "values": ["32"]}],
                }
            },
            "disruption": {"consolidateAfter": "Never"},  # a scale-out alone, as upstream's suite measures it
        },
    }
    return {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "e2e-burst"},
        "spec": {
            "start": start.isoformat(),
            "duration": "2h",
            "cloud": {"launchLatency": launch, "registrationLatency": registration},
            "nodePools": [pool],
            "workloads": [{"name": WORKLOAD, "replicas": 0, "requests": {"cpu": "1"}}],
            "timeline": [{"at": f"{round(burst_after * 1000)}ms", "scale": {"workload": WORKLOAD, "replicas": pods}}],
        },
    }


class Memory(threading.Thread):
    """Every service's resident (VmRSS) and proportional (Pss) set size, sampled every
    SAMPLE_SECONDS: each one's peak and the peak of their sum, in bytes."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peak: dict[str, int] = dict.fromkeys(pids, 0)
        self.peak_pss: dict[str, int] = dict.fromkeys(pids, 0)
        self.peak_total = self.peak_total_pss = 0
        self.done = threading.Event()

    def sample(self) -> dict[str, int]:
        rss, pss = {}, {}
        for name, pid in self.pids.items():
            rss[name] = _kib(Path(f"/proc/{pid}/status"), "VmRSS:")
            pss[name] = _kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss:")
            self.peak[name] = max(self.peak[name], rss[name])
            self.peak_pss[name] = max(self.peak_pss[name], pss[name])
        self.peak_total = max(self.peak_total, sum(rss.values()))
        self.peak_total_pss = max(self.peak_total_pss, sum(pss.values()))
        return rss

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(SAMPLE_SECONDS)

    def stop(self) -> None:
        self.done.set()
        self.join()


def _kib(path: Path, key: str) -> int:
    """A `key: N kB` line of a /proc file, in bytes (0 once the process is gone)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def metrics(port: int) -> dict[str, float]:
    """A service's unlabelled samples (labelled ones summed), by name."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    out: dict[str, float] = {}
    for name, value in re.findall(r"^([a-zA-Z_:][\w:]*)(?:\{[^}]*\})? (\S+)$", text, re.M):
        out[name] = out.get(name, 0.0) + float(value)
    return out


FACTS = """
SELECT type, count(DISTINCT stream_id) AS streams, min(recorded_at) AS first, max(recorded_at) AS last,
       min(occurred_at) AS first_at, max(occurred_at) AS last_at, count(DISTINCT occurred_at) AS instants
FROM events
WHERE type = ANY($1::text[]) AND (stream_id LIKE 'nodeclaim-%' OR stream_id LIKE $2)
GROUP BY type
"""
TYPES = ["PodPending", "PodBound", "NodeClaimCreated", "NodeClaimLaunched", "NodeClaimLaunchFailed"]
BOUND = "SELECT count(DISTINCT stream_id) FROM events WHERE type = 'PodBound' AND stream_id LIKE $1"
POOL_APPLIED = "SELECT count(*) FROM events WHERE type = 'NodePoolApplied'"
PODS = f"pod-%/{WORKLOAD}-%"


async def _until_bound(url: str, pods: int, deadline: float) -> dict[str, asyncpg.Record]:
    """Poll the log until every pod of the burst is recorded bound; then the facts, by type."""
    conn = await asyncpg.connect(**driver_params(url))
    try:
        while (done := await conn.fetchval(BOUND, PODS)) < pods:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {done} of {pods} pods bound")
            await asyncio.sleep(POLL_SECONDS)
        return {r["type"]: r for r in await conn.fetch(FACTS, TYPES, PODS)}
    finally:
        await conn.close()


def _ready(children: list[children_of.Child], url: str, burst: float) -> None:
    """Every service ready, the pool recorded, the scheduler leading, before the burst (wall
    time): the burst meets a system at rest."""
    for child in children:
        children_of.wait_ready(child)

    async def settled() -> bool:
        conn = await asyncpg.connect(**driver_params(url))
        try:
            applied = await conn.fetchval(POOL_APPLIED)
        finally:
            await conn.close()
        scheduler = next(c for c in children if c.name == "scheduler")
        return applied > 0 and metrics(scheduler.port).get("nodewright_scheduler_leader") == 1

    while not asyncio.run(settled()) and time.time() < burst:
        time.sleep(0.2)
    if time.time() >= burst:
        raise SystemExit("the services were not ready and settled before the burst: raise --warmup")


def run_once(
    database_url: str,
    nats_url: str | None,
    workdir: Path,
    *,
    pods: int,
    warmup: float,
    launch: str = "30s",
    registration: str = "20s",
    timeout: float = 300.0,
) -> dict[str, Any]:
    """One burst on a migrated, empty database; the figures, in wall seconds and bytes."""
    workdir.mkdir(parents=True, exist_ok=True)
    origin = time.time()
    start = datetime.fromtimestamp(origin, UTC)
    clock = AcceleratedClock(start, 1.0, origin)  # speed 1: the simulated instant is the wall instant
    burst = origin + warmup
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(pods, start, warmup, launch, registration)))
    config = Settings(
        database_url=database_url,
        nats_url=nats_url,
        deployment=f"e2e{os.getpid()}x{workdir.name}".lower()[:32],  # a stream of its own: ids repeat per run
        data_dir=workdir / "data",
    )
    config.data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NODEWRIGHT_DATABASE_URL": database_url, **clock.environment()}
    with local_bus(config) as bus:
        if config.nats_url:  # an embedded bus is set up as it starts; a configured one as `up` does
            asyncio.run(set_up(bus.acting_as("setup"), ack_wait=config.termination_ack_wait))
        cluster = LocalCluster.create(config.data_dir, free_tcp_port(), config.deployment)
        with children_of.started(config.data_dir, path, env, bus, None, cluster.environments()) as children:
            _ready(children, database_url, burst)
            ready = time.time() - origin
            memory = Memory({c.name: c.process.pid for c in children})
            idle = memory.sample()
            memory.start()
            try:
                facts = asyncio.run(_until_bound(database_url, pods, time.monotonic() + warmup + timeout))
            finally:
                memory.stop()
            scheduler = metrics(next(c for c in children if c.name == "scheduler").port)
    figures = _figures(pods, burst, clock, facts, scheduler, memory, idle, config, launch, registration)
    return figures | {"startup_s": ready}


def _figures(
    pods: int,
    burst: float,
    clock: AcceleratedClock,
    facts: dict[str, asyncpg.Record],
    scheduler: dict[str, float],
    memory: Memory,
    idle: dict[str, int],
    config: Settings,
    launch: str,
    registration: str,
) -> dict[str, Any]:
    def wall(at: datetime) -> float:
        return clock.origin + (at - clock.start) / timedelta(seconds=1) / clock.speed

    def since(at: datetime) -> float:
        return at.timestamp() - burst

    created, pending, bound = facts["NodeClaimCreated"], facts["PodPending"], facts["PodBound"]
    window = wall(created["first_at"]) - burst  # the first pass ran at its window's close
    durable = since(created["last"])
    stages = {
        "first PodPending committed": since(pending["first"]),
        "last PodPending committed": since(pending["last"]),
        "batch window closed (first pass)": window,
        "first NodeClaimCreated committed": since(created["first"]),
        "last NodeClaimCreated committed": durable,
        "last NodeClaimLaunched committed": since(facts["NodeClaimLaunched"]["last"]),
        "last PodBound committed": since(bound["last"]),
    }
    passes = int(scheduler.get("karpenter_scheduler_scheduling_duration_seconds_count", 0))
    latencies = (parse_duration(launch) + parse_duration(registration)).total_seconds() / clock.speed
    return {
        "pods": pods,
        "bound": int(bound["streams"]),
        "nodeclaims": int(created["streams"]),
        "launch_failures": int(facts["NodeClaimLaunchFailed"]["streams"]) if "NodeClaimLaunchFailed" in facts else 0,
        "passes_creating_claims": int(created["instants"]),
        "scheduler_passes": passes,
        "pass_compute_s": scheduler.get("karpenter_scheduler_scheduling_duration_seconds_sum", 0.0),
        "batch_idle_s": config.batch_idle_duration,
        "batch_max_s": config.batch_max_duration,
        "window_s": window,
        "after_window_s": durable - window,
        "burst_to_durable_s": durable,
        "burst_to_bound_s": since(bound["last"]),
        "sim_latencies_s": latencies,
        "stages_s": stages,
        "rss_peak_total_mb": memory.peak_total / MB,
        "pss_peak_total_mb": memory.peak_total_pss / MB,
        "rss_peak_mb": {name: memory.peak[name] / MB for name in SERVICES},
        "pss_peak_mb": {name: memory.peak_pss[name] / MB for name in SERVICES},
        "rss_before_burst_mb": {name: idle[name] / MB for name in SERVICES},
    }


def _met(value: float, goal: float, strict: bool = False) -> str:
    ok = value < goal if strict else value <= goal
    return "met" if ok else "not met"


def render(r: dict[str, Any]) -> str:
    """One run's table: each figure beside upstream's bound, with the ratio and the goal."""
    bound_ratio = r["burst_to_bound_s"] / UPSTREAM_SCALE_OUT_S
    rss_ratio = r["rss_peak_total_mb"] / UPSTREAM_PROCESS_MB
    rows = [
        ("figure", "nodewright", "upstream's bound", "ratio", "goal"),
        (
            "burst -> last NodeClaim durable, after the window",
            f"{r['after_window_s']:.2f} s",
            "-",
            "-",
            f"<= {GOAL_AFTER_WINDOW_S:.0f} s: {_met(r['after_window_s'], GOAL_AFTER_WINDOW_S)}",
        ),
        ("burst -> last NodeClaim durable", f"{r['burst_to_durable_s']:.2f} s", "-", "-", ""),
        (
            f"burst -> all {r['bound']:,} pods bound",
            f"{r['burst_to_bound_s']:.1f} s",
            f"{UPSTREAM_SCALE_OUT_S:.0f} s (1,000-pod scale-out)",
            f"{bound_ratio:.2f}x",
            f"(sim latencies {r['sim_latencies_s']:.0f} s)",
        ),
        (
            f"services' RSS, peak of the sum ({len(SERVICES)} processes)",
            f"{r['rss_peak_total_mb']:.0f} MB",
            f"{UPSTREAM_PROCESS_MB:.0f} MB (one process)",
            f"{rss_ratio:.2f}x",
            f"< {GOAL_RSS_MB:.0f} MB: {_met(r['rss_peak_total_mb'], GOAL_RSS_MB, strict=True)}",
        ),
        ("services' PSS, peak of the sum", f"{r['pss_peak_total_mb']:.0f} MB", "", "", ""),
    ]
    for name in SERVICES:
        peak, rest, pss = r["rss_peak_mb"][name], r["rss_before_burst_mb"][name], r["pss_peak_mb"][name]
        rows.append((f"  {name}: RSS peak (at rest), PSS peak", f"{peak:.0f} ({rest:.0f}), {pss:.0f} MB", "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"{r['nodeclaims']} NodeClaims ({r['launch_failures']} launch failures) from "
        f"{r['passes_creating_claims']} pass(es); {r['scheduler_passes']} scheduler pass(es) computed "
        f"for {r['pass_compute_s']:.2f} s; batch window {r['batch_idle_s']:g} s idle / {r['batch_max_s']:g} s max"
    )
    lines.append(f"every service started and ready in {r['startup_s']:.1f} s")
    lines.append("stages, seconds after the burst: " + "; ".join(f"{k} {v:.2f}" for k, v in r["stages_s"].items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=20.0, help="wall seconds from the start to the burst")
    parser.add_argument("--launch-latency", default="30s")
    parser.add_argument("--registration-latency", default="20s")
    parser.add_argument("--logs", type=Path, help="keep the services' logs in this directory")
    parser.add_argument("--smoke", action="store_true", help="20 pods, no sim latencies: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.pods, args.runs, args.warmup, args.launch_latency, args.registration_latency = 20, 1, 15.0, "0s", "0s"
    results = []
    with ExitStack() as stack:
        workdir = args.logs or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for index in range(args.runs):
            with bench_database() as url:
                r = run_once(
                    url,
                    settings().nats_url,
                    workdir / f"run{index}",
                    pods=args.pods,
                    warmup=args.warmup,
                    launch=args.launch_latency,
                    registration=args.registration_latency,
                )
            results.append(r)
            print(f"run {index + 1} of {args.runs}, {os.cpu_count()} cores")
            print(render(r))
    print(
        json.dumps(
            {
                "upstream_scale_out_s": UPSTREAM_SCALE_OUT_S,
                "upstream_process_mb": UPSTREAM_PROCESS_MB,
                "runs": results,
            }
        )
    )


if __name__ == "__main__":
    main()
