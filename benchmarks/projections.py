"""Projection fold benchmark: a burst of PodPending + PodBound recorded events folded into the
three services' projections, CPU time, against the bare walk of the same payload dicts.

- baseline: read each payload's fields as dicts (`data["namespace"]`, `data.get("node")`): the
  floor any fold pays;
- decode: each recorded event into its contract (`shared.events.decode`), nothing else;
- scheduler, disruption, termination: each projection's `apply` over the burst (decode included).

`--against CHECKOUT` also folds the burst in the scheduler's projection of another checkout (a
process of its own per round, alternating with this one's), with and without the contract check
its projection consumer runs before each apply: old against new, on the same machine.

Each figure is the best of the rounds (the worst beside it). Run: `make bench`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def burst(pods: int) -> list[Any]:
    """`pods` PodPending then PodBound facts, spread over 100 nodes, as the store returns them."""
    from shared.events import contracts as c
    from shared.events.envelope import Metadata, RecordedEvent

    events: list[Any] = []
    for i in range(pods):
        pending = c.PodPending(
            namespace="default",
            name=f"web-{i}",
            uid=f"u{i}",
            requests={"cpu": "500m", "memory": "1Gi"},
            labels={"app": "web", "shard": str(i % 10)},
            owner_kind="ReplicaSet",
            owner_name="web",
        )
        bound = c.PodBound(
            namespace="default",
            name=f"web-{i}",
            uid=f"u{i}",
            node=f"n{i % 100}",
            requests={"cpu": "500m", "memory": "1Gi"},
            labels={"app": "web", "shard": str(i % 10)},
            owner_kind="ReplicaSet",
        )
        for event in (pending, bound):
            at = T0 + timedelta(milliseconds=len(events))
            events.append(
                RecordedEvent(
                    len(events) + 1,
                    uuid.uuid4(),
                    event.stream_id,
                    1,
                    event.TYPE,
                    1,
                    event.payload(),
                    Metadata("watcher"),
                    at,
                    at,
                )
            )
    return events


def _walk(events: list[Any]) -> None:
    for event in events:
        data = event.data
        _ = (data["namespace"], data["name"], data.get("uid"), data.get("node"), data.get("requests"))


def _cpu(fold: Callable[[], object]) -> float:
    started = time.process_time()
    fold()
    return time.process_time() - started


def fold_once(pods: int, mode: str) -> float:
    """CPU seconds of one fold of a fresh burst into the scheduler's projection, in whatever
    checkout is on the path (the moved one, or the old `shared.scheduling.view.Projection`)."""
    try:
        from services.scheduler.projection import Projection
    except ImportError:  # a checkout before the scheduler's projection moved beside its service
        from shared.scheduling.view import Projection  # type: ignore[no-redef]
    from shared.events.registry import REGISTRY

    events = burst(pods)
    projection = Projection()
    if mode == "validated":  # what the projection consumer adds: the contract check, then apply

        def fold() -> None:
            for event in events:
                REGISTRY.decode(event.type, event.schema_version, event.data)
                projection.apply((event,))

        return _cpu(fold)
    return _cpu(lambda: projection.apply(events))


def in_process(pods: int, rounds: int) -> dict[str, list[float]]:
    from services.disruption.projection import Projection as Disruption
    from services.scheduler.projection import Projection as Scheduler
    from services.termination.projection import Projection as Termination
    from shared.events.decode import decode

    def each(apply: Callable[[Any], object]) -> Callable[[list[Any]], None]:
        return lambda events: [apply(e) for e in events] and None

    folds: dict[str, Callable[[list[Any]], object]] = {
        "baseline (dict walk)": _walk,
        "decode": each(decode),
        "scheduler": lambda events: Scheduler().apply(events),
        "disruption": lambda events: each(Disruption().apply)(events),
        "termination": lambda events: each(Termination().apply)(events),
    }
    times: dict[str, list[float]] = {name: [] for name in folds}
    for _ in range(rounds):  # alternating: a slow moment of the machine costs every fold alike
        for name, fold in folds.items():
            events = burst(pods)  # fresh objects: nothing decoded before
            times[name].append(_cpu(lambda fold=fold, events=events: fold(events)))
    return times


def against(checkout: Path, pods: int, rounds: int) -> dict[str, list[float]]:
    here = Path(__file__).resolve().parents[1]
    runs = {
        "old scheduler fold": (checkout, "fold"),
        "old scheduler fold + contract check": (checkout, "validated"),
        "new scheduler fold (decodes)": (here, "fold"),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (root, mode) in runs.items():
            worker = [
                sys.executable,
                str(here / "benchmarks" / "projections.py"),
                "--worker",
                mode,
                "--pods",
                str(pods),
            ]
            env = {**os.environ, "PYTHONPATH": str(root)}
            out = subprocess.run(worker, cwd=root, env=env, capture_output=True, text=True, check=True)
            times[name].append(json.loads(out.stdout)["cpu"])
    return times


def report(title: str, pods: int, times: dict[str, list[float]]) -> None:
    print(f"{title}: {2 * pods} events ({pods} PodPending + {pods} PodBound), CPU seconds, best (worst)")
    base = min(next(iter(times.values())))
    for name, seconds in times.items():
        best = min(seconds)
        per_event = 1e6 * best / (2 * pods)
        print(f"  {name:<38} {best:8.3f} ({max(seconds):.3f})  x{best / base:5.2f}  {per_event:6.2f} us/event")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another checkout whose scheduler fold to compare")
    parser.add_argument("--worker", choices=("fold", "validated"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps({"cpu": fold_once(args.pods, args.worker)}))
        return
    pods, rounds = (500, 1) if args.smoke else (args.pods, args.rounds)
    report("In process", pods, in_process(pods, rounds))
    if args.against:
        report(f"Against {args.against}", pods, against(args.against, pods, rounds))


if __name__ == "__main__":
    main()
