"""`nodewright run` plays a scenario to its end with every service on a log of its own, audits,
summarises and reports; `nodewright report` rebuilds the report from an exported log. The
scenario is the flagship day `make demo` plays, and the test holds it to its promises while
each service is killed in turn and PostgreSQL restarted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest

from cli import report
from shared.bus.names import BusNames
from shared.policy.audit import LogEntry
from shared.runtime.postgres import EmbeddedPostgres
from shared.store.eventstore import EventStore
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, run_log_url, stop_command

pytestmark = pytest.mark.timeout(420)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
FLAGSHIP = ROOT / "examples/scenarios/flagship-day.yaml"
SUMMARY_KEYS = {
    "scenario",
    "run",
    "report",
    "events",
    "from",
    "to",
    "nodeclaims_created",
    "nodeclaims_terminated",
    "disruptions",
    "decisions_by_reason",
    "decisions",
    "blocked",
    "blocked_by_reason",
    "unconsolidatable",
    "max_disrupting",
    "max_nodes",
    "limits",
    "node_limits",
    "over_limit",
    "instances_lost",
    "disruptions_inside_blocked_windows",
    "pending_pods_at_end",
    "violations",
    "audit_ok",
    "evictions",
    "pdb_violations",
    "final_nodes",
    "terminations",
    "samples",
    "head_digest",
    "restarts",
}


def nodewright(env: dict[str, str], cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NODEWRIGHT, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


SPEED = 720
KILLS = [
    (17, 16, "sim"),
    (17, 40, "watcher"),
    (18, 4, "scheduler"),
    (18, 28, "disruption"),
    (18, 52, "termination"),
    (19, 16, "relay"),
]
"""In the busiest hours (the drift rollout resumes after the freeze, consolidation, pods bound
again), each service in turn is killed with SIGKILL; `up` restarts it. The sim comes back to the
world it left from its journal; it goes first, as the one whose absence (about 2 s, half an hour
of the day at 720x) stalls every other service, so the evening's acts have time to catch up
before the 23:00 spot interruption (which must find a node nodewright is not already removing:
the scenario puts it three hours after the database restart, when the web pool's evening
consolidation is over)."""
DATABASE_RESTART = (20, 0)


def service_pid(data_dir: Path, service: str) -> int | None:
    """The process running `services.<service>` for this data dir."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"services.{service}".encode() in cmdline and f"NODEWRIGHT_DATA_DIR={data_dir}".encode() in environ:
            return int(proc.name)
    return None


def inject_faults(data_dir: Path, server: EmbeddedPostgres, run: subprocess.Popen[str]) -> list[str]:
    """Wait for the held clock to open, then at each planned simulated instant kill a service;
    restart PostgreSQL last. What was done, in order."""
    gate = data_dir / "clock-origin"
    deadline = time.monotonic() + 120
    while not gate.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    origin = float(gate.read_text())

    def at(hour: int, minute: int) -> None:
        wall = origin + (timedelta(hours=hour - 6, minutes=minute)).total_seconds() / SPEED
        time.sleep(max(wall - time.time(), 0))

    done = []
    for hour, minute, service in KILLS:
        at(hour, minute)
        pid = service_pid(data_dir, service)
        assert pid is not None, service
        os.kill(pid, signal.SIGKILL)
        done.append(f"{service} {pid}")
    at(*DATABASE_RESTART)
    server.restart(down_for=2.0)
    done.append("postgres")
    return done


async def stream_event_ids(url: str, names: BusNames) -> tuple[list[str], list[str]]:
    """The event ids on the stream, in order, and the reasons of the dead letters beside them."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        out: list[list[bytes]] = []
        for subject in (names.events, names.all_dead):
            sub = await js.pull_subscribe(subject, stream=names.stream)
            taken: list[bytes] = []
            with contextlib.suppress(TimeoutError):  # nats-py raises its own, or asyncio's when the deadline is spent
                while True:
                    for m in await sub.fetch(500, timeout=3):
                        taken.append(m.data)
                        await m.ack()  # else the consumer stops at its 1,000 unacknowledged
            out.append(taken)
        return [json.loads(d)["event_id"] for d in out[0]], [d.decode(errors="replace")[:300] for d in out[1]]
    finally:
        await nc.close()


def duplicates(events: list[LogEntry]) -> tuple[list[str], list[str]]:
    """Pods a second NodeClaim was made for while the first was still in flight (launched, not
    initialized) and the pod unbound; pods evicted twice. Once the first claim's node is
    initialized, the cluster's scheduler may bind another pending pod there (it does not honour
    Karpenter's nominations, upstream's neither), and a new claim for a pod still pending is
    the right answer, not a duplicate."""
    in_flight: set[str] = set()
    waiting: dict[str, str] = {}  # pod -> the claim made for it, until the pod is bound
    twice: list[str] = []
    again: list[str] = []
    evicted: set[str] = set()
    for e in events:
        if e.type == "NodeClaimCreated":
            in_flight.add(e.data["nodeclaim"])
            for pod in e.data.get("pods") or []:
                if waiting.get(pod) in in_flight:
                    twice.append(pod)
                waiting[pod] = e.data["nodeclaim"]
        elif e.type in ("NodeClaimInitialized", "NodeClaimTerminated", "NodeClaimLaunchFailed"):
            in_flight.discard(e.data["nodeclaim"])
        elif e.type in ("PodBound", "PodDeleted"):
            waiting.pop(f"{e.data.get('namespace')}/{e.data.get('name')}", None)
        elif e.type == "PodEvicted":
            key = f"{e.data.get('namespace')}/{e.data.get('name')}"
            if key in evicted:
                again.append(key)
            evicted.add(key)
    return twice, again


def _entries(*steps: tuple[str, dict]) -> list[LogEntry]:
    return [LogEntry(i, "s", kind, data, datetime(2026, 1, 1, tzinfo=UTC)) for i, (kind, data) in enumerate(steps)]


def test_a_second_claim_counts_as_a_duplicate_only_while_the_first_is_in_flight():
    first = ("NodeClaimCreated", {"nodeclaim": "a", "pods": ["default/p"]})
    second = ("NodeClaimCreated", {"nodeclaim": "b", "pods": ["default/p"]})
    assert duplicates(_entries(first, second)) == (["default/p"], [])
    initialized = ("NodeClaimInitialized", {"nodeclaim": "a"})  # another pod took its room
    assert duplicates(_entries(first, initialized, second)) == ([], [])
    bound = ("PodBound", {"namespace": "default", "name": "p"})
    assert duplicates(_entries(first, bound, second)) == ([], [])


def test_the_flagship_day_keeps_its_promises_through_faults_and_its_report_rebuilds(tmp_path, nats_server_url):
    """The day `make demo` plays, with each service killed in turn and PostgreSQL restarted in its
    busiest hours: no duplicate NodeClaim, no lost event, no pod evicted twice, no limit passed,
    no budget exceeded, the audit clean; then its export rebuilds the same report. The kills
    are reported (exit 3, each with why): a run that lost a process is not a clean run."""
    names = BusNames(f"fl{os.getpid()}")
    with EmbeddedPostgres(tmp_path / "pg") as server:
        env = cli_environment(tmp_path, server.url, nats_server_url, names.deployment)
        out = tmp_path / "report"
        run = subprocess.Popen(
            [NODEWRIGHT, "run", str(FLAGSHIP), "--speed", str(SPEED), "--report", str(out), "-o", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        try:
            faults = inject_faults(tmp_path / "data", server, run)
            stdout, stderr = run.communicate(timeout=300)
        finally:
            stop_command(run)
        assert run.returncode == 3, stdout[-3000:] + stderr[-3000:]  # each kill is a death: not a clean run
        assert len(faults) == len(KILLS) + 1
        assert stdout.strip(), stderr[-6000:]  # exit 3 without a summary: a process given up on
        summary = json.loads(stdout)
        log = run_log_url(server.url, summary["run"])
        events = asyncio.run(report.database_events(log))
        # what was committed after the relay stopped, as its next start would publish it
        published = nodewright({**env, "NODEWRIGHT_DATABASE_URL": log}, tmp_path, "relay", "--once")
        assert published.returncode == 0, published.stderr
        on_stream, dead = asyncio.run(stream_event_ids(nats_server_url, names))
        logged = [str(e) for e in asyncio.run(event_ids(log))]
        seen = set(on_stream)
        missing = [
            (i + 1, events[i].type, events[i].occurred_at.isoformat()) for i, e in enumerate(logged) if e not in seen
        ]
        assert on_stream == logged, (len(on_stream), len(logged), missing[:5], missing[-3:])  # none lost, none twice
        assert dead == []  # no consumer gave up on a message
        twice, evicted_again = duplicates(events)
        assert twice == [] and evicted_again == []
        killed = {"count": 1, "reasons": {"killed by SIGKILL": 1}}
        assert summary["restarts"] == {service: killed for _, _, service in KILLS}  # and nothing else died
        for _, _, service in KILLS:
            assert f"error: {service} died once: killed by SIGKILL" in stderr
        _check_promises_and_report(env, tmp_path, summary, out)


async def event_ids(url: str) -> list[str]:
    store = EventStore.connect(url, pool_size=1)
    try:
        return [str(e.event_id) async for page in store.read_all() for e in page]
    finally:
        await store.close()


def _check_promises_and_report(env: dict[str, str], tmp_path: Path, summary: dict, out: Path) -> None:
    assert set(summary) == SUMMARY_KEYS
    # the promises: a clean audit, no launch past a limit, no disruption in a blocked window
    assert summary["audit_ok"] is True and summary["violations"] == []
    assert summary["over_limit"] == [] and summary["disruptions_inside_blocked_windows"] == []
    assert summary["node_limits"] == {"web": [8, 5]} and summary["max_nodes"]["web"] <= 8
    # each act of the day happened
    assert {"Drifted", "OverLimit"} <= set(summary["disruptions"])
    assert {"Empty", "Underutilized"} & set(summary["disruptions"])
    # the spot interruption: the instance it picked is lost, unless nodewright was removing it already
    picked = json.loads((tmp_path / "data" / "sim-score.json").read_text())["interruptions"]
    removing = {t["nodeclaim"] for t in summary["terminations"]}
    assert len(picked) == 1 and summary["instances_lost"] == sum(p["nodeclaim"] not in removing for p in picked)
    assert summary["blocked_by_reason"].get("Budget/Underutilized", 0) >= 1  # backend1a's weekday block
    # batch's budgets cover every reason: one node at a time. backend1a's "1" covers Empty and Drifted
    # only, so after its Underutilized block ends at midnight nothing bounds Underutilized (upstream's
    # minimum over no matching budget): two replacements may overlap, and the audit checks each decision
    assert summary["max_disrupting"].get("batch", 0) <= 1
    assert summary["pdb_violations"] == 0
    # each termination told: requested, drained (pods evicted) and ended in that order
    ended = [t for t in summary["terminations"] if t["terminated_at"] is not None]
    assert ended and all(t["requested_at"] <= t["terminated_at"] for t in ended)
    assert sum(t["evicted"] for t in ended) >= 1 and summary["evictions"] >= sum(t["evicted"] for t in ended)
    assert set(summary["samples"]) == {"burst", "consolidated", "drifted"}
    # the report
    png = (out / "nodes.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
    width, height = struct.unpack(">II", png[16:24])
    assert 1000 <= width <= 3000 and 600 <= height <= 2000
    page = (out / "report.md").read_text()
    for reason in summary["disruptions"]:
        assert f"| {reason} |" in page
    assert json.loads((out / "summary.json").read_text())["decisions"] == summary["decisions"]
    # the run is listed, and its export rebuilds the same report
    listed = json.loads(nodewright(env, tmp_path, "runs", "-o", "json").stdout)
    assert summary["run"] in [r["name"] for r in listed]
    log = tmp_path / "log.jsonl"
    exported = nodewright(env, tmp_path, "events", "export", str(log), "--run", summary["run"])
    assert exported.returncode == 0, exported.stderr
    again = nodewright(env, tmp_path, "report", str(tmp_path / "again"), "--from-file", str(log))
    assert again.returncode == 0, again.stderr
    rebuilt = json.loads((tmp_path / "again" / "summary.json").read_text())
    for key in ("decisions", "disruptions", "max_nodes", "over_limit", "samples", "head_digest", "events"):
        assert rebuilt[key] == summary[key], key
