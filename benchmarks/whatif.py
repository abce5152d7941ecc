"""What-if benchmark: a recorded week of the flagship's three NodePools replayed by `nodewright
whatif` in both variants (the recorded pools, then web's budget at "0"), offline, in one process.

The recording is made offline by the same runner (`services.whatif.runner`): `week()` turns
`make demo`'s flagship day (examples/scenarios/flagship-day.yaml) into `--days` days with a
weekly shape, the runner plays it once, and its log, written as `events export` writes one, is
"the recording". The replay then reads that file as `whatif --from-file` does and runs
`services.whatif.replay.whatif`, the command's own function: demand rebuilt, both variants
played, figures, fidelity.

Figures: wall and CPU seconds per variant, simulated time over wall time, and the baseline each
is held to in the same run: the recording's own play (the same runner on the scenario the log
came from, so "replay / recording" is what rebuilding the demand from a log costs or saves).
Goals (issue 36): both variants <= 60 s; `explain --at` on the log < 2 s (`explain_at`).

Run: `python -m benchmarks.whatif [--days 7] [--cached] [--log FILE] [--profile FILE]`;
`--quick` (or `--smoke`, the suite's name for it): the first 2h30m of one day, a few seconds.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from shared.whatif.sim import UNKNOWN, SimSettings

ROOT = Path(__file__).resolve().parents[1]
FLAGSHIP = ROOT / "examples" / "scenarios" / "flagship-day.yaml"
CACHE = ROOT / "benchmarks" / ".cache"
QUICK_SPAN = timedelta(hours=2, minutes=30)
"""`--quick`: the flagship's first morning, up to and past web's burst at 08:00 (2 h in)."""
GOAL_BOTH_SECONDS = 60.0
GOAL_EXPLAIN_SECONDS = 2.0
MOST_DAYS = 60
CHANGED_POOL = "web"
"""The variant: web's budget at "0" (issue 36's test), so web's consolidation stops."""


@dataclass
class Recording:
    """The log a play of the week left, where it is, and what recording it cost."""

    path: Path
    events: int
    simulated_seconds: float
    wall_seconds: float | None
    cpu_seconds: float | None
    recorded_at: str
    this_run: bool
    seed: int | None = None
    """The scenario's sim seed (None: not known, as for a `--log` given without `--seed`)."""


@dataclass
class Variant:
    name: str
    wall_seconds: float
    cpu_seconds: float
    events: int


def read_flagship() -> dict[str, Any]:
    from shared.runtime.inputs import read_yaml

    (document,) = [d for d in read_yaml(FLAGSHIP) if d is not None]
    return dict(document)


def week(flagship: dict[str, Any], days: int, span: timedelta | None = None) -> dict[str, Any]:
    """The flagship day played `days` times from its Monday, in a weekly shape:

    - a weekday plays the flagship's timeline; a pool it applies with a new template (batch's
      image) gets a label of the day's too, so every weekday has its rollout;
    - a weekend day scales each workload to half (rounded up) and applies no pool;
    - each morning after the first, every workload is back at its size (halved at weekends) and
      every pool the day before applied is back to its first spec with the template it has now
      (web's limit returns to 8);
    - the cloud's interruptions (a spot reclaim at 23:00) happen every day.

    `span` cuts the scenario there (what `--quick` plays)."""
    from shared.api.duration import format_duration, parse_duration

    doc = copy.deepcopy(flagship)
    spec = doc["spec"]
    start = datetime.fromisoformat(str(spec["start"]).replace("Z", "+00:00"))
    initial = {p["metadata"]["name"]: p for p in spec["nodePools"]}
    sizes = {w["name"]: int(w.get("replicas", 1)) for w in spec["workloads"]}
    current = copy.deepcopy(initial)
    timeline: list[tuple[timedelta, dict[str, Any]]] = []
    interruptions: list[tuple[timedelta, dict[str, Any]]] = []
    applied: set[str] = set()
    for day in range(days):
        morning = timedelta(days=day)
        weekday = (start + morning).weekday() < 5
        if day:
            for name, size in sizes.items():
                timeline.append((morning, {"scale": {"workload": name, "replicas": _shaped(size, weekday)}}))
            for name in sorted(applied):
                back = copy.deepcopy(initial[name])
                back["spec"]["template"] = copy.deepcopy(current[name]["spec"]["template"])
                timeline.append((morning, {"applyNodePool": back}))
                current[name] = back
            applied = set()
        for entry in spec.get("timeline") or []:
            at = morning + parse_duration(entry["at"])
            if "scale" in entry:
                scale = entry["scale"]
                replicas = _shaped(int(scale["replicas"]), weekday)
                timeline.append((at, {"scale": {"workload": scale["workload"], "replicas": replicas}}))
            elif "applyNodePool" in entry and weekday:
                pool = copy.deepcopy(entry["applyNodePool"])
                name = pool["metadata"]["name"]
                if day and pool["spec"].get("template") != initial[name]["spec"].get("template"):
                    labels = pool["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})
                    labels["rollout"] = f"day-{day + 1}"
                timeline.append((at, {"applyNodePool": pool}))
                current[name] = pool
                applied.add(name)
            elif "applyNodePool" not in entry:
                timeline.append((at, {k: v for k, v in entry.items() if k != "at"}))
        for interruption in spec.get("cloud", {}).get("interruptions") or []:
            at = morning + parse_duration(interruption["at"])
            interruptions.append((at, {k: v for k, v in interruption.items() if k != "at"}))
    duration = span or timedelta(days=days)
    spec["duration"] = format_duration(duration)
    spec["timeline"] = [{"at": format_duration(at), **e} for at, e in timeline if at < duration]
    spec.setdefault("cloud", {})["interruptions"] = [
        {"at": format_duration(at), **e} for at, e in interruptions if at < duration
    ]
    doc["metadata"] = {"name": f"flagship-week-{days}d" if span is None else "flagship-quick"}
    return doc


def _shaped(replicas: int, weekday: bool) -> int:
    return replicas if weekday else -(-replicas // 2)


def changed_pool(flagship: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """web as the flagship starts it, with a budget of "0": no voluntary disruption at all."""
    (pool,) = [p for p in flagship["spec"]["nodePools"] if p["metadata"]["name"] == CHANGED_POOL]
    pool = copy.deepcopy(pool)
    pool["spec"]["disruption"]["budgets"] = [{"nodes": "0"}]
    return f"{CHANGED_POOL}-budget-0.yaml", pool


def cache_key(document: dict[str, Any]) -> str:
    """The scenario and the code that plays it: any change to either records again."""
    digest = hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode())
    for package in ("services", "shared"):
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(path.relative_to(ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def record(document: dict[str, Any], directory: Path, cached: bool) -> Recording:
    """The week played once by the offline runner, its log written as `events export` writes
    one (no trailer: `whatif --from-file` needs none). With `cached`, a recording of the same
    scenario by the same code is reused and its cost is the one it had then."""
    from services.whatif.runner import Runner
    from shared.api.scenario import parse_scenario

    key = cache_key(document)
    path, meta = directory / f"whatif-{key}.jsonl", directory / f"whatif-{key}.json"
    if cached and path.exists() and meta.exists():
        kept = json.loads(meta.read_text())
        return Recording(path=path, this_run=False, **{k: kept.get(k) for k in _KEPT})
    scenario = parse_scenario(document, source="the benchmark's week")
    cpu = time.process_time()
    played = Runner(scenario).play()
    cpu = time.process_time() - cpu
    directory.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(e.to_json_dict(), separators=(",", ":")) + "\n" for e in played.log)
    rec = Recording(
        path=path,
        events=len(played.log),
        simulated_seconds=(played.end - played.start).total_seconds(),
        wall_seconds=played.seconds,
        cpu_seconds=cpu,
        recorded_at=datetime.now().astimezone().isoformat(timespec="seconds"),
        this_run=True,
        seed=played.sim.seed,
    )
    meta.write_text(json.dumps({k: v for k, v in asdict(rec).items() if k in _KEPT}) + "\n")
    return rec


_KEPT = ("events", "simulated_seconds", "wall_seconds", "cpu_seconds", "recorded_at", "seed")


def from_log(path: Path, entries: Sequence[Any], seed: int | None) -> Recording:
    """A log recorded elsewhere (`nodewright run`, then `events export`): no recording cost."""
    span = (max(e.occurred_at for e in entries) - entries[0].occurred_at).total_seconds() if entries else 0.0
    return Recording(path, len(entries), span, None, None, "elsewhere", this_run=False, seed=seed)


def sim_of(rec: Recording) -> SimSettings:
    """The seed the replays and `explain` price with: the recording's, as `--run` reads a run's."""
    return UNKNOWN if rec.seed is None else UNKNOWN.given(rec.seed)


def replay(
    entries: Sequence[Any], change: tuple[str, dict[str, Any]], sim: SimSettings
) -> tuple[dict[str, Any], list[Variant]]:
    """`whatif`'s own function on the log; each variant's play timed where it is made
    (`services.whatif.replay.play`, wrapped, not copied)."""
    from services.whatif import replay as replaying

    plays: list[Variant] = []
    play = replaying.play

    def timed(document: dict[str, Any], gates: Any = None) -> Any:
        cpu = time.process_time()
        played = play(document, gates)
        name = ("baseline", "changed")[min(len(plays), 1)]
        plays.append(Variant(name, played.seconds, time.process_time() - cpu, len(played.log)))
        return played

    with mock.patch.object(replaying, "play", timed):
        result = replaying.whatif(entries, [change], sim=sim)
    if [v.name for v in plays] != ["baseline", "changed"]:
        raise RuntimeError(f"whatif played {len(plays)} variants, not the baseline and the change")
    return result, plays


@dataclass
class ExplainTiming:
    nodeclaim: str
    at: str
    seconds: float | None
    """The whole `nodewright explain` process, as a user waits for it."""
    said: str
    core_seconds: float | None = None
    """`services.whatif.explain.explain` in this process: the replay to T and the answer."""


def explain_at(log: Path, entries: Sequence[Any], sim: SimSettings) -> ExplainTiming | None:
    """`explain --at` on the log's last claim a disruption decided on, asked about just before
    the decision (a late T is the dearest: the log is replayed up to it). Timed twice: the
    answer in process, and the whole command, whose start-up every command pays."""
    from cli.explain import read_events
    from services.whatif.explain import explain

    case = _explain_case(entries)
    if case is None:
        return None
    nodeclaim, at = case
    started = time.perf_counter()
    explain(read_events(log), nodeclaim, at=datetime.fromisoformat(at), sim=sim)  # as the command reads it
    core = time.perf_counter() - started
    command = [sys.executable, "-m", "cli.main", "explain", "nodeclaim", nodeclaim, "--at", at, "--from-file", str(log)]
    if sim.known:
        command += ["--seed", str(sim.seed)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        said = f"`explain` exited {done.returncode}: {done.stderr.strip()[-300:]}"
        return ExplainTiming(nodeclaim, at, None, said, core)
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    return ExplainTiming(nodeclaim, at, seconds, first, core)


def _explain_case(entries: Sequence[Any]) -> tuple[str, str] | None:
    for event in reversed(entries):
        if event.type == "DisruptionDecided":
            at = event.occurred_at - timedelta(seconds=1)
            return str(event.data["candidates"][0]), at.isoformat().replace("+00:00", "Z")
    return None


def report(rec: Recording, result: dict[str, Any], plays: list[Variant], explained: ExplainTiming | None) -> None:
    simulated = rec.simulated_seconds
    print(f"log: {rec.path} ({rec.events:,} events, {simulated / 3600:.1f} h simulated)")
    if rec.wall_seconds is not None and rec.cpu_seconds is not None:
        when = "this run" if rec.this_run else f"an earlier run, {rec.recorded_at}: --cached; ratios across runs"
        print(
            f"recording (the runner on the week's scenario, {when}): {rec.wall_seconds:.1f} s wall,"
            f" {rec.cpu_seconds:.1f} s CPU, {simulated / rec.wall_seconds:,.0f}x simulated time"
        )
    for v in plays:
        against = f", {v.wall_seconds / rec.wall_seconds:.2f}x the recording" if rec.wall_seconds else ""
        label = "baseline (recorded pools)" if v.name == "baseline" else f'changed ({CHANGED_POOL} budget "0")'
        print(
            f"replay, {label}: {v.wall_seconds:.1f} s wall, {v.cpu_seconds:.1f} s CPU,"
            f" {simulated / v.wall_seconds:,.0f}x simulated time{against} ({v.events:,} events)"
        )
    both = float(result["seconds"])
    rest = both - sum(v.wall_seconds for v in plays)
    met = "met" if both <= GOAL_BOTH_SECONDS else "not met"
    print(
        f"both variants, as `whatif` counts them (demand rebuilt and figures included: {rest:.1f} s):"
        f" {both:.1f} s; goal <= {GOAL_BOTH_SECONDS:.0f} s: {met}"
    )
    fidelity = result["fidelity"]
    print("fidelity: faithful" if fidelity["faithful"] else "fidelity: NOT faithful: " + "; ".join(fidelity["beyond"]))
    base = result["baseline"]["pools"].get(CHANGED_POOL, {})
    after = result["changed"]["pools"].get(CHANGED_POOL, {})
    print(
        f"the change, {CHANGED_POOL}: disruptions {base.get('disruptions', {})} -> {after.get('disruptions', {})},"
        f" node-hours {base.get('node_hours', 0):g} -> {after.get('node_hours', 0):g}"
    )
    if explained is None:
        print("explain --at: no claim of the log was disrupted: nothing to ask about")
    elif explained.seconds is None:
        print(f"explain --at: nodeclaim {explained.nodeclaim} at {explained.at}: {explained.said}")
    else:
        core = explained.core_seconds or 0.0
        met = "met" if core < GOAL_EXPLAIN_SECONDS else "not met"
        print(
            f"explain --at: nodeclaim {explained.nodeclaim} at {explained.at}: {core:.2f} s to answer"
            f" (goal < {GOAL_EXPLAIN_SECONDS:.0f} s: {met}); {explained.seconds:.2f} s the whole command,"
            " start-up included"
        )
    print(
        json.dumps(
            {
                "events": rec.events,
                "simulated_hours": round(simulated / 3600, 2),
                "recording_seconds": None if rec.wall_seconds is None else round(rec.wall_seconds, 2),
                "recording_this_run": rec.this_run,
                "variants": {
                    v.name: {"seconds": round(v.wall_seconds, 2), "cpu": round(v.cpu_seconds, 2)} for v in plays
                },
                "both_seconds": round(both, 2),
                "simulated_per_wall": {v.name: round(simulated / v.wall_seconds, 1) for v in plays},
                "faithful": fidelity["faithful"],
                "explain_seconds": None
                if explained is None or explained.core_seconds is None
                else round(explained.core_seconds, 2),
                "explain_command_seconds": None
                if explained is None or explained.seconds is None
                else round(explained.seconds, 2),
            }
        )
    )


@contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """cProfile around the replay when asked (`--profile FILE`; read it with `python -m pstats`)."""
    if path is None:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(path)
        print(f"profile of the replay written to {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, help="days of the recorded week (default 7)")
    parser.add_argument("--quick", "--smoke", action="store_true", help="the first 2h30m of one day: a few seconds")
    parser.add_argument("--cached", action="store_true", help="reuse a recording of the same scenario by the same code")
    parser.add_argument(
        "--cache", type=Path, default=CACHE, help="where recordings are kept (default benchmarks/.cache)"
    )
    parser.add_argument("--log", type=Path, help="replay this exported log (`events export`) instead of recording")
    parser.add_argument("--seed", type=int, help="with --log: the sim seed of the run that recorded it")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the replay here")
    args = parser.parse_args()
    if args.days is not None and not 1 <= args.days <= MOST_DAYS:
        parser.error(f"argument --days: must be between 1 and {MOST_DAYS}, not {args.days}")
    if args.seed is not None and args.log is None:
        parser.error("argument --seed: only with --log (a recording here knows its own seed)")
    if args.log is not None and (args.days is not None or args.quick or args.cached):
        parser.error("argument --log: replays the file as it is; --days, --quick and --cached make a recording")
    from cli.whatif import read_log
    from shared.whatif.demand import DemandError

    flagship = read_flagship()
    change = changed_pool(flagship)
    with tempfile.TemporaryDirectory(prefix="whatif-bench-") as scratch:
        if args.log is not None:
            try:
                entries = read_log(args.log)
            except (OSError, ValueError) as exc:
                print(f"error: --log: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
            rec = from_log(args.log, entries, args.seed)
        else:
            days = 1 if args.quick else args.days or 7
            document = week(flagship, days, QUICK_SPAN if args.quick else None)
            rec = record(document, Path(scratch) if args.quick else args.cache, args.cached)
            entries = read_log(rec.path)
        try:
            with profiled(args.profile):
                result, plays = replay(entries, change, sim_of(rec))
        except DemandError as exc:
            print(f"error: {'--log: ' if args.log else ''}{exc}", file=sys.stderr)
            raise SystemExit(2) from None
        explained = explain_at(rec.path, entries, sim_of(rec))
        report(rec, result, plays, explained)


if __name__ == "__main__":
    main()
