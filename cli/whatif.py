"""`nodewright whatif`: the recorded demand replayed against changed NodePools, told side by side
(`services.whatif.replay` does the work; this reads the inputs and tells the result)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cli.audit import read_jsonl
from cli.report import REASON_COLOURS
from shared.policy.audit import LogEntry
from shared.runtime.inputs import read_yaml
from shared.whatif.sim import SimSettings, from_description

FIGURES = ("node_hours", "cost", "peak_nodes", "launches", "pending_pod_minutes", "longest_wait_minutes", "limit_hits")
COUNTS = ("disruptions", "blocked")


def read_log(path: Path) -> list[LogEntry]:
    return list(read_jsonl(path))


async def database_log(url: str) -> tuple[list[LogEntry], SimSettings]:
    """The log of the database `url` reaches, and the sim settings its run's description keeps
    (unknown for a database no `nodewright run` described, or one described before they were)."""
    from cli.report import database_events
    from shared.runtime.runs import described

    where, description = await described(url)
    return await database_events(url), from_description(description, where)


def read_nodepools(paths: Sequence[Path]) -> list[tuple[str, Any]]:
    """Every NodePool document of the files, each with where it came from."""
    out: list[tuple[str, Any]] = []
    for path in paths:
        documents = [d for d in read_yaml(path) if d is not None]
        if not documents:
            raise ValueError(f"{path}: no NodePool document in the file")
        for i, document in enumerate(documents):
            if not isinstance(document, dict) or document.get("kind") != "NodePool":
                raise ValueError(f"{path}: document {i + 1}: kind: must be NodePool")
            out.append((f"{path}" if len(documents) == 1 else f"{path}#{i + 1}", document))
    return out


def render(result: dict[str, Any]) -> str:
    lines = ["fidelity (the baseline replay against the record):"]
    fidelity = result["fidelity"]
    seed = fidelity["seed"]
    lines.append(f"  sim seed {seed['value']} ({seed['from']})")
    if gates := fidelity.get("gates"):
        on = ", ".join(gates["on"]) or "all off"
        lines.append(f"  feature gates {on} ({gates['from']})")
    for pool, rows in fidelity["pools"].items():
        shown = ", ".join(
            f"{figure} {row['recorded']:g}/{row['replayed']:g}{'' if row['within'] else ' (!)'}"
            for figure, row in rows.items()
        )
        lines.append(f"  {pool}: {shown}  (recorded/replayed)")
    if fidelity["faithful"]:
        lines.append("  faithful: every figure within its tolerance (docs/whatif.md)")
    else:
        lines.append("  NOT faithful beyond the tolerances:")
        lines.extend(f"    {why}" for why in fidelity["beyond"])
    base, changed, delta = result["baseline"]["pools"], result["changed"]["pools"], result["difference"]
    for pool in sorted(set(base) | set(changed)):
        lines.append(f"nodepool {pool}:            baseline     changed   difference")
        b, c, d = base.get(pool, {}), changed.get(pool, {}), delta.get(pool, {})
        for figure in FIGURES:
            lines.append(f"  {figure:<22}{b.get(figure, 0):>10g}  {c.get(figure, 0):>10g}  {d.get(figure, 0):>+10g}")
        for count in COUNTS:
            for key in sorted(set(b.get(count, {})) | set(c.get(count, {}))):
                was, now = b.get(count, {}).get(key, 0), c.get(count, {}).get(key, 0)
                lines.append(f"  {count + ' ' + key:<22}{was:>10g}  {now:>10g}  {now - was:>+10g}")
    lines.extend(result["notes"])
    lines.append(f"both replays in {result['seconds']:.1f} s")
    return "\n".join(lines)


def write_report(
    directory: Path, result: dict[str, Any], series: dict[str, dict[str, list[tuple[Any, int]]]]
) -> list[Path]:
    """`whatif.json` and `whatif.png`: nodes per pool over time, the baseline solid and the
    change dashed, in the colours `run --report` uses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    js = directory / "whatif.json"
    js.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    fig, ax = plt.subplots(figsize=(12, 5))
    colours = list(REASON_COLOURS.values())
    for i, pool in enumerate(sorted(set(series["baseline"]) | set(series["changed"]))):
        colour = f"C{i % 10}" if i >= len(colours) else f"C{i}"
        for variant, style in (("baseline", "-"), ("changed", "--")):
            points = series[variant].get(pool) or []
            if points:
                xs, ys = zip(*points, strict=True)
                ax.step(xs, ys, where="post", linestyle=style, color=colour, label=f"{pool} ({variant})")
    ax.set_ylabel("nodes")
    ax.set_title("nodewright whatif: nodes per NodePool, baseline (solid) and changed (dashed)")
    ax.legend(loc="upper left", fontsize="small")
    fig.autofmt_xdate()
    png = directory / "whatif.png"
    fig.savefig(png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [png, js]
