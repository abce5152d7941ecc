"""`nodewright run --report DIR` and `nodewright report DIR`: a run told as a picture
(`nodes.png`), a page (`report.md`) and the summary (`summary.json`), from a run's database or
an exported JSONL log."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from cli.audit import AuditResult, audit_database, audit_file, read_jsonl
from cli.migrate import open_store
from cli.summary import Timeline, story, summarise
from shared.policy.audit import LogEntry

REASON_COLOURS = {
    "Underutilized": "tab:orange",
    "Empty": "tab:olive",
    "Drifted": "tab:purple",
    "OverLimit": "tab:red",
    "Overprovisioned": "tab:pink",
    "Expired": "tab:brown",
    "Manual": "tab:gray",
}
MARKERS = {"Underutilized": "v", "Empty": "o", "Drifted": "D", "OverLimit": "X", "Overprovisioned": "P", "Expired": "s"}
PICTURE, PAGE, SUMMARY = "nodes.png", "report.md", "summary.json"
FILES = (PICTURE, PAGE, SUMMARY)
"""What a report directory holds (`outputs.check_directory` checks each can be written first)."""


async def database_events(url: str) -> list[LogEntry]:
    store = await open_store(url)
    try:
        async with store.driver_connection() as raw:
            rows = await raw.fetch("SELECT position, stream_id, type, data, occurred_at FROM events ORDER BY position")
    finally:
        await store.close()
    return [LogEntry(*row) for row in rows]


async def from_database(
    url: str, name: str, score: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Timeline, list[LogEntry]]:
    result = await audit_database(url)
    events = await database_events(url)
    return _told(name, events, result, score)


def from_file(path: Path) -> tuple[dict[str, Any], Timeline, list[LogEntry]]:
    result = audit_file(path)
    return _told(path.stem, list(read_jsonl(path)), result, None)


def _told(
    name: str, events: list[LogEntry], result: AuditResult, score: dict[str, Any] | None
) -> tuple[dict[str, Any], Timeline, list[LogEntry]]:
    violations = [v.to_dict() for v in result.replay.violations] + [p.to_dict() for p in result.chain]
    summary, timeline = summarise(name, events, result.replay, violations, result.ok, score)
    summary["head_digest"] = result.digest
    return summary, timeline, events


def write(directory: Path, summary: dict[str, Any], timeline: Timeline, events: Sequence[LogEntry]) -> list[Path]:
    """The three files; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    stories = {label: (claim, story(events, claim)) for label, claim in summary["samples"].items()}
    png = directory / PICTURE
    plot(timeline, summary, png)
    md = directory / PAGE
    md.write_text(markdown(summary, stories, png.name), encoding="utf-8")
    js = directory / SUMMARY
    js.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return [png, md, js]


def plot(t: Timeline, summary: dict[str, Any], path: Path) -> None:
    """Nodes per pool over time with its node limit and each disruption marked by reason; beneath,
    a lane per pool and reason shaded where its budget allows no disruption; then pending pods."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    end = t.end or datetime.now().astimezone()
    lanes = sorted({(w.nodepool, w.reason) for w in t.blocked})
    fig, (top, middle, bottom) = plt.subplots(
        3,
        1,
        figsize=(13, 8.5),
        sharex=True,
        gridspec_kw={"height_ratios": [3.2, 0.35 + 0.22 * max(len(lanes), 1), 1]},
        constrained_layout=True,
    )
    pools = sorted(t.nodes)
    colours = {p: f"C{i % 10}" for i, p in enumerate(pools)}
    for pool in pools:
        series = _extend(t.nodes[pool], end)
        top.step([a for a, _ in series], [v for _, v in series], where="post", color=colours[pool], lw=1.8, label=pool)
        limits = _extend(t.limits.get(pool, []), end)
        if any(v is not None for _, v in limits):
            xs, ys = [a for a, _ in limits], [float("nan") if v is None else v for _, v in limits]
            top.step(xs, ys, where="post", color=colours[pool], ls="--", lw=1, label=f"{pool} limits.nodes")
    marked: set[str] = set()
    for at, pool, reason in t.disruptions:
        top.scatter(
            [at],
            [_at(t.nodes.get(pool, []), at)],
            marker=MARKERS.get(reason, "*"),
            s=50,
            zorder=5,
            color=REASON_COLOURS.get(reason, "black"),
            edgecolors="black",
            linewidths=0.4,
            label=f"disrupted: {reason}" if reason not in marked else None,
        )
        marked.add(reason)
    for i, (at, pool) in enumerate(t.lost):
        top.scatter(
            [at],
            [_at(t.nodes.get(pool, []), at) + 1],
            marker="$\\downarrow$",
            s=90,
            color="black",
            label="instance reclaimed (spot)" if i == 0 else None,
        )
    top.set_ylabel("nodes")
    top.set_ylim(bottom=0)
    top.set_title(f"{summary['scenario']}: nodes per NodePool")
    top.grid(alpha=0.25)
    top.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, framealpha=0.9)
    for row, (pool, reason) in enumerate(lanes):
        spans = [(w.start, w.end - w.start) for w in t.blocked if (w.nodepool, w.reason) == (pool, reason)]
        middle.broken_barh(spans, (row + 0.15, 0.7), color=REASON_COLOURS.get(reason, "tab:gray"), alpha=0.55)
    middle.set_yticks([i + 0.5 for i in range(len(lanes))], [f"{p}: {r}" for p, r in lanes], fontsize=8)
    middle.set_ylim(0, max(len(lanes), 1))
    middle.set_title("budget-blocked windows (no disruption allowed)", fontsize=9, loc="left")
    middle.grid(axis="x", alpha=0.25)
    if not lanes:
        middle.text(0.5, 0.5, "no budget blocked any reason", transform=middle.transAxes, ha="center", va="center")
    pending = _extend(t.pending, end) or [(t.start or end, 0), (end, 0)]
    bottom.step([a for a, _ in pending], [v for _, v in pending], where="post", color="tab:blue")
    bottom.fill_between([a for a, _ in pending], [v for _, v in pending], step="post", alpha=0.25)
    bottom.set_ylabel("pending pods")
    bottom.set_xlabel("simulated time (UTC)")
    bottom.grid(alpha=0.25)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(bottom.xaxis.get_major_locator()))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _extend(series: list[tuple[datetime, Any]], end: datetime) -> list[tuple[datetime, Any]]:
    """A step series held to the end of the run."""
    return [*series, (end, series[-1][1])] if series else []


def _at(series: list[tuple[datetime, int]], at: datetime) -> int:
    level = 0
    for when, value in series:
        if when > at:
            break
        level = value
    return level


def markdown(summary: dict[str, Any], stories: dict[str, tuple[str, list[dict[str, Any]]]], picture: str) -> str:
    s = summary
    lines = [
        f"# {s['scenario']}",
        "",
        f"![nodes per NodePool]({picture})",
        "",
        "## Summary",
        "",
        f"- simulated span: {s['from']} to {s['to']}; {s['events']} events in the log",
        f"- NodeClaims: {s['nodeclaims_created']} created, {s['nodeclaims_terminated']} terminated;"
        f" {s['pending_pods_at_end']} pods pending at the end",
        f"- audit: {'OK' if s['audit_ok'] else 'VIOLATIONS'}; head digest `{s.get('head_digest', '-')}`",
        f"- instances the cloud took away (spot interruptions): {s['instances_lost']}",
        f"- pods evicted: {s['evictions']}"
        + (f"; PDB violations (the sim's count): {s['pdb_violations']}" if s["pdb_violations"] is not None else ""),
        "",
        "| NodePool | most nodes | limits.nodes over the run | most disrupting at once | nodes at the end |",
        "| --- | --- | --- | --- | --- |",
    ]
    for pool, peak in s["max_nodes"].items():
        limit = " → ".join(str(v) for v in s["node_limits"].get(pool, [])) or "-"
        lines.append(
            f"| {pool} | {peak} | {limit} | {s['max_disrupting'].get(pool, 0)} | {s['final_nodes'].get(pool, 0)} |"
        )
    lines += ["", "## Decisions by reason", ""]
    if s["decisions_by_reason"]:
        lines += ["| reason | decisions | NodeClaims disrupted |", "| --- | --- | --- |"]
        reasons = sorted(set(s["decisions_by_reason"]) | set(s["disruptions"]))
        lines += [f"| {r} | {s['decisions_by_reason'].get(r, 0)} | {s['disruptions'].get(r, 0)} |" for r in reasons]
    else:
        lines.append("No disruption was decided.")
    lines += ["", "## Blocked decisions by cause", ""]
    if s["blocked_by_reason"]:
        lines += ["| cause / reason | DisruptionBlocked |", "| --- | --- |"]
        lines += [f"| {k} | {n} |" for k, n in s["blocked_by_reason"].items()]
    else:
        lines.append("Nothing was blocked.")
    if s.get("unconsolidatable"):
        told = ", ".join(f"{pool} {n}" for pool, n in s["unconsolidatable"].items())
        lines += ["", f"`Unconsolidatable` (a node's reason, recorded when it changes), per pool: {told}."]
    lines += ["", "## Promises", ""]
    over = s["over_limit"]
    lines.append(
        "- node limits: never passed by a launch"
        if not over
        else f"- node limits: passed by {len(over)} launch(es): " + ", ".join(o["nodeclaim"] for o in over[:5])
    )
    inside = s["disruptions_inside_blocked_windows"]
    lines.append(f"- disruptions inside a window their budget blocks: {len(inside) or 'none'}")
    if s["violations"]:
        lines.append(f"- audit violations: {len(s['violations'])}")
        lines += [f"  - #{v.get('position')} {v.get('stream')}: {v.get('detail')}" for v in s["violations"][:20]]
    lines += ["", "## Three NodeClaims, explained", ""]
    titles = {"burst": "made by the burst", "consolidated": "consolidated", "drifted": "drifted"}
    if not stories:
        lines.append("The log holds no NodeClaim to explain.")
    for label, (claim, chapters) in stories.items():
        lines += [f"### {claim} ({titles.get(label, label)})", ""]
        lines += [f"1. `{c['at']}` #{c['position']}: {_short(c['text'])}" for c in chapters]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _short(text: str) -> str:
    """A story's list of 50 instance types, cut to its first few."""

    def cut(match: re.Match[str]) -> str:
        items = match.group(1).split(", ")
        return f"[{', '.join(items[:4])}, ... {len(items)} in all]" if len(items) > 6 else match.group(0)

    return re.sub(r"\[([^\[\]]+)\]", cut, text)
