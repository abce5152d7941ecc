"""`nodewright run SCENARIO`: `nodewright up` with the scenario until it ends, then the audit,
then a clean stop, and one summary of what happened."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from services.cli import up
from services.cli.eventlog import audit_database, open_store
from shared.config import Settings
from shared.runtime.scenarios import load_scenario

WALL_SECONDS = 60.0
"""By default a scenario plays in about this long, whatever its duration."""
SETTLE_SECONDS = 2.0


def default_speed(duration: timedelta) -> float:
    return max(duration.total_seconds() / WALL_SECONDS, 1.0)


def run(config: Settings, path: Path, speed: float | None = None, console: Console | None = None) -> dict[str, Any]:
    scenario = load_scenario(path)
    speed = speed or default_speed(scenario.end - scenario.start)
    wall = (scenario.end - scenario.start).total_seconds() / speed + SETTLE_SECONDS

    score_path = config.data_dir / SCORE
    score_path.unlink(missing_ok=True)  # a score is the last run's own
    if not config.database_url:  # a run's summary is its own: it starts from an empty log
        shutil.rmtree(config.data_dir / "postgres", ignore_errors=True)

    async def summarise(database_url: str) -> dict[str, Any]:
        result = await audit_database(database_url)
        store = await open_store(database_url)
        try:
            facts = [f async for page in store.read_types(_COUNTED) for f in page]
            pending = await _pending_at_end(store)
            terminations, evicted = await _terminations(store)
            disruption = await _disruption(store)
            live = await store.counters()
        finally:
            await store.close()
        current: dict[str, int] = {}
        peak: dict[str, int] = {}
        created = terminated = 0
        for kind, data in facts:
            pool = data.get("nodepool")
            if kind == "NodeClaimCreated":
                created += 1
                current[pool] = current.get(pool, 0) + 1
                peak[pool] = max(peak.get(pool, 0), current[pool])
            else:
                terminated += kind == "NodeClaimTerminated"
                current[pool] = current.get(pool, 0) - 1
        limits = {
            name: dict((pool.spec or {}).get("spec", {}).get("limits") or {})
            for name, pool in result.replay.pools.items()
        }
        score = _score(score_path)
        return {
            "scenario": scenario.name,
            "events": result.replay.events,
            "nodeclaims_created": created,
            "nodeclaims_terminated": terminated,
            **disruption,
            "max_nodes": dict(sorted(peak.items())),
            "limits": dict(sorted(limits.items())),
            "pending_pods_at_end": pending,
            "violations": [v.to_dict() for v in result.replay.violations],
            "audit_ok": result.ok,
            "evictions": score.get("evictions", evicted),
            "pdb_violations": score.get("pdb_violations", 0),
            "final_nodes": {name: pool.nodes for name, pool in sorted(live.items()) if pool.version},
            "terminations": terminations,
        }

    _, summary = up.up(
        config, path, speed, run_for=wall, live=False, console=console or Console(quiet=True), then=summarise
    )
    return summary


_COUNTED = ["NodeClaimCreated", "NodeClaimLaunchFailed", "NodeClaimTerminated"]
SCORE = "sim-score.json"
"""What the sim counted (evictions, PDB violations), written when it stops."""


def _score(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


async def _terminations(store: Any) -> tuple[list[dict[str, Any]], int]:
    """Every claim whose deletion was asked for: when, when it ended, the pods evicted and forced;
    and how many pods were evicted in all (the log's count)."""
    async with store.driver_connection() as raw:
        rows = await raw.fetch(
            "SELECT type, data, occurred_at FROM events WHERE type = ANY($1::text[]) ORDER BY position",
            ["NodeClaimDeletionRequested", "NodeClaimTerminated", "PodEvicted"],
        )
    out: dict[str, dict[str, Any]] = {}
    ended: dict[str, str] = {}
    evicted = 0
    for kind, data, at in rows:
        claim = data.get("nodeclaim")
        if kind == "NodeClaimDeletionRequested" and claim not in out:
            out[claim] = {
                "nodeclaim": claim,
                "nodepool": data.get("nodepool"),
                "requested_at": at.isoformat(),
                "terminated_at": None,
                "evicted": 0,
                "forced": 0,
            }
        elif kind == "NodeClaimTerminated":
            ended[claim] = at.isoformat()
        elif kind == "PodEvicted":
            evicted += not data.get("forced")
            if claim in out:
                out[claim]["forced" if data.get("forced") else "evicted"] += 1
    for claim, termination in out.items():
        termination["terminated_at"] = ended.get(claim)
    return list(out.values()), evicted


async def _disruption(store: Any) -> dict[str, Any]:
    """What disruption did, from the log: NodeClaims disrupted per reason (handed to termination),
    every decision, the `DisruptionBlocked` said per cause, and per pool the most NodeClaims
    disrupting at once (decided, not cancelled, not yet terminated)."""
    async with store.driver_connection() as raw:
        rows = await raw.fetch(
            "SELECT type, data, occurred_at FROM events WHERE type = ANY($1::text[]) ORDER BY position",
            [
                "DisruptionDecided",
                "DisruptionValidated",
                "DisruptionCancelled",
                "DisruptionCompleted",
                "DisruptionBlocked",
                "NodeClaimDeletionRequested",
                "NodeClaimTerminated",
            ],
        )
    disrupted: dict[str, int] = {}
    decisions: list[dict[str, Any]] = []
    blocked: dict[str, int] = {}
    going: dict[str, str] = {}  # claim -> its pool, while a decision holds it
    peak: dict[str, int] = {}
    for kind, data, at in rows:
        if kind == "DisruptionDecided":
            decisions.append(
                {
                    "at": at.isoformat().replace("+00:00", "Z"),
                    "nodepool": data["nodepool"],
                    "reason": data["reason"],
                    "decision": data.get("decision") or ("replace" if data.get("replacements") else "delete"),
                    "nodeclaims": list(data["candidates"]),
                    "replacements": list(data.get("replacements") or []),
                }
            )
            going.update(dict.fromkeys(data["candidates"], data["nodepool"]))
            pool = data["nodepool"]  # only a decision adds: the peak can only be reached here
            peak[pool] = max(peak.get(pool, 0), sum(1 for p in going.values() if p == pool))
        elif kind == "DisruptionValidated":
            for name in data.get("dropped") or {}:
                going.pop(name, None)
        elif kind == "DisruptionCancelled":
            for name in data.get("candidates") or []:
                going.pop(name, None)
        elif kind == "NodeClaimDeletionRequested" and data.get("decision_id"):
            disrupted[data["reason"]] = disrupted.get(data["reason"], 0) + 1
        elif kind == "NodeClaimTerminated":
            going.pop(data["nodeclaim"], None)
        elif kind == "DisruptionBlocked":
            cause = data.get("cause") or "Budget"
            blocked[cause] = blocked.get(cause, 0) + 1
    return {
        "disruptions": dict(sorted(disrupted.items())),
        "decisions": decisions,
        "blocked": dict(sorted(blocked.items())),
        "max_disrupting": dict(sorted(peak.items())),
    }


async def _pending_at_end(store: Any) -> int:
    async with store.driver_connection() as raw:
        return sum(1 for r in await up.latest_states(raw) if r["type"] == "PodPending")


def render(summary: dict[str, Any]) -> str:
    lines = [
        f"scenario {summary['scenario']}: {summary['events']} events, "
        f"{summary['nodeclaims_created']} NodeClaims created, {summary['nodeclaims_terminated']} terminated, "
        f"{summary['pending_pods_at_end']} pods pending at the end",
    ]
    for pool, peak in summary["max_nodes"].items():
        limit = summary["limits"].get(pool, {}).get("nodes")
        lines.append(f"  nodepool {pool}: at most {peak} nodes" + (f" (limits.nodes {limit})" if limit else ""))
    ended = [t for t in summary["terminations"] if t["terminated_at"]]
    if summary["terminations"]:
        lines.append(
            f"terminations: {len(ended)} of {len(summary['terminations'])} asked for ended; "
            f"{summary['evictions']} pods evicted, {summary['pdb_violations']} PDB violations"
        )
    if summary["decisions"]:
        reasons = ", ".join(f"{reason} {n}" for reason, n in summary["disruptions"].items()) or "none carried out"
        lines.append(f"disruption: {len(summary['decisions'])} decision(s); NodeClaims disrupted: {reasons}")
        for pool, most in summary["max_disrupting"].items():
            lines.append(f"  nodepool {pool}: at most {most} disrupting at once")
    if summary["blocked"]:
        lines.append("DisruptionBlocked: " + ", ".join(f"{cause} {n}" for cause, n in summary["blocked"].items()))
    if summary["violations"]:
        lines.append(f"audit: {len(summary['violations'])} violation(s)")
        lines.extend(f"  #{v['position']} {v['stream']} [{v['rule']}] {v['detail']}" for v in summary["violations"])
    else:
        lines.append("audit: clean")
    return "\n".join(lines)
