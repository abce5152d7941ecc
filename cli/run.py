"""`nodewright run SCENARIO`: `nodewright up` with the scenario until it ends, then the audit,
then a clean stop, and one summary of what happened.

A run in which a service process died is not a clean run: the summary's `restarts` says which,
how often and why, and the command exits non-zero (`exit_code`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from cli import outputs, report, up
from cli.failures import EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_UNUSABLE
from shared.config import Settings
from shared.runtime import runs
from shared.runtime.scenarios import load_scenario
from shared.whatif.sim import RUN_KEY, described

WALL_SECONDS = 60.0
"""By default a scenario plays in about this long, whatever its duration."""
SETTLE_SECONDS = 2.0


def default_speed(duration: timedelta) -> float:
    return max(duration.total_seconds() / WALL_SECONDS, 1.0)


def run(
    config: Settings,
    path: Path,
    speed: float | None = None,
    console: Console | None = None,
    report_dir: Path | None = None,
    started: datetime | None = None,
) -> dict[str, Any]:
    """Play the scenario on a log of its own (a new database, `shared.runtime.runs`), audit it,
    and summarise it; with `report_dir` (checked first: `outputs.OutputError`), write the report
    there too."""
    if report_dir is not None:
        outputs.check_directory(report_dir, "--report", report.FILES)
    scenario = load_scenario(path, gates=config.gates)
    speed = speed or default_speed(scenario.end - scenario.start)
    wall = (scenario.end - scenario.start).total_seconds() / speed + SETTLE_SECONDS
    started = started or datetime.now(UTC)
    name = runs.run_name(scenario.name, started)
    cloud = scenario.spec.cloud
    description = {
        "scenario": scenario.name,
        "file": str(path),
        "started": started.isoformat(),
        "speed": speed,
        RUN_KEY: described(scenario.spec.seed, cloud.instance_types, cloud.zones),  # for `whatif`, `explain`
    }

    score_path = config.data_dir / SCORE
    score_path.unlink(missing_ok=True)  # a score is the last run's own

    async def summarise(database_url: str, view: dict[str, Any]) -> dict[str, Any]:
        score = _score(score_path)
        summary, timeline, events = await report.from_database(database_url, scenario.name, score)
        summary["run"] = name
        summary["restarts"] = view.get("restarts", {})
        if report_dir is not None:
            try:
                report.write(report_dir, summary, timeline, events)
                summary["report"] = str(report_dir)
            except OSError as exc:  # checked before the run, yet gone since: the summary is kept
                summary["report_error"] = f"--report: cannot write the report in {report_dir}: {exc}"
        headline = {k: summary[k] for k in _HEADLINE}
        await runs.describe(database_url, name, {**description, "score": score, "summary": headline})
        return summary

    _, summary = up.up(
        config,
        path,
        speed,
        run_for=wall,
        live=False,
        console=console or Console(quiet=True),
        then=summarise,
        run=(name, description),
    )
    return summary


def exit_code(summary: dict[str, Any]) -> int:
    """1 when the audit found a violation (a promise broken weighs most); else 3 when a service
    process died during the run (an internal error: the run is not clean); else 2 when the
    report could not be written; else 0."""
    if not summary["audit_ok"]:
        return EXIT_FAILED
    if summary.get("restarts"):
        return EXIT_INTERNAL
    if summary.get("report_error"):
        return EXIT_UNUSABLE
    return EXIT_OK


def restart_lines(restarts: dict[str, Any]) -> list[str]:
    """Which process died, how often and why: one line each, for `run` and `up` to end with."""
    lines = []
    for service, died in restarts.items():
        times = "once" if died["count"] == 1 else f"{died['count']} times"
        why = "; ".join(f"{reason} (x{n})" if n > 1 else reason for reason, n in died["reasons"].items())
        gave_up = ", then was given up on" if died.get("gave_up") else ""
        lines.append(f"{service} died {times}{gave_up}: {why}")
    return lines


_HEADLINE = ("events", "nodeclaims_created", "nodeclaims_terminated", "audit_ok", "pending_pods_at_end", "restarts")
SCORE = "sim-score.json"
"""What the sim counted (evictions, PDB violations, the instances spot interruptions picked),
written when it stops."""


def _score(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def render(summary: dict[str, Any]) -> str:
    lines = [
        f"scenario {summary['scenario']}: {summary['events']} events, "
        f"{summary['nodeclaims_created']} NodeClaims created, {summary['nodeclaims_terminated']} terminated, "
        f"{summary['pending_pods_at_end']} pods pending at the end",
    ]
    for pool, peak in summary["max_nodes"].items():
        limits = " then ".join(str(v) for v in summary["node_limits"].get(pool, []))
        lines.append(f"  nodepool {pool}: at most {peak} nodes" + (f" (limits.nodes {limits})" if limits else ""))
    ended = [t for t in summary["terminations"] if t["terminated_at"]]
    if summary["terminations"]:
        lines.append(
            f"terminations: {len(ended)} of {len(summary['terminations'])} asked for ended; "
            f"{summary['evictions']} pods evicted, {summary['pdb_violations'] or 0} PDB violations"
        )
    if summary["decisions"]:
        reasons = ", ".join(f"{reason} {n}" for reason, n in summary["disruptions"].items()) or "none carried out"
        lines.append(f"disruption: {len(summary['decisions'])} decision(s); NodeClaims disrupted: {reasons}")
        for pool, most in summary["max_disrupting"].items():
            lines.append(f"  nodepool {pool}: at most {most} disrupting at once")
    if summary["blocked"]:
        lines.append("DisruptionBlocked: " + ", ".join(f"{cause} {n}" for cause, n in summary["blocked"].items()))
    if summary.get("unconsolidatable"):
        told = ", ".join(f"{pool} {n}" for pool, n in summary["unconsolidatable"].items())
        lines.append(f"Unconsolidatable (changes of reason): {told}")
    if summary["instances_lost"]:
        lines.append(f"instances the cloud took away (spot interruptions): {summary['instances_lost']}")
    over, inside = summary["over_limit"], summary["disruptions_inside_blocked_windows"]
    lines.append(f"node limits passed by a launch: {len(over) or 'never'}")
    lines.append(f"disruptions inside a window their budget blocks: {len(inside) or 'none'}")
    if summary["violations"]:
        lines.append(f"audit: {len(summary['violations'])} violation(s)")
        lines.extend(
            f"  #{v.get('position')} {v.get('stream')} [{v.get('rule') or v.get('kind')}] {v.get('detail')}"
            for v in summary["violations"]
        )
    else:
        lines.append("audit OK")
    if summary.get("restarts"):
        lines.append("processes that died (a run that crashed is not a clean run):")
        lines.extend(f"  {line}" for line in restart_lines(summary["restarts"]))
    if summary.get("report"):
        lines.append(f"report: {summary['report']}/report.md (and nodes.png, summary.json)")
    if summary.get("run"):
        lines.append(f"run: {summary['run']} (`nodewright audit --run {summary['run']}`, `nodewright runs`)")
    return "\n".join(lines)
