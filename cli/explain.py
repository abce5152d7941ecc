"""`nodewright explain nodeclaim NAME` and `explain node NAME`: why a claim was or was not
disrupted at an instant, method by method, from a run's log or an exported file, offline
(`services.whatif.explain` does the work; this reads the inputs and tells the answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.commands.options import Output, OutputOption
from cli.database import RunOption, with_database
from shared.events.envelope import RecordedEvent

if TYPE_CHECKING:
    from shared.whatif.sim import SimSettings

explain_app = typer.Typer(
    help="Why a NodeClaim was or was not disrupted at an instant, method by method (offline, from a log).",
    no_args_is_help=True,
)

AtOption = Annotated[
    str | None,
    typer.Option(
        "--at",
        help="the instant (RFC 3339); default: the decision that disrupted it, else the log's end",
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="the recorded run's scenario seed (it draws the sim's prices); default: the run's description"
        " records it, an exported file does not (then 0, and the answer says so)",
    ),
]
FromFileOption = Annotated[
    Path | None, typer.Option("--from-file", help="an exported JSONL log (`events export`) instead of a run")
]


def register(app: typer.Typer) -> None:
    app.add_typer(explain_app, name="explain")
    explain_app.command("nodeclaim")(nodeclaim)
    explain_app.command("node")(node)


def nodeclaim(
    name: Annotated[str, typer.Argument(help="the NodeClaim's name (or its stream id, nodeclaim-NAME)")],
    at: AtOption = None,
    from_file: FromFileOption = None,
    seed: SeedOption = None,
    output: OutputOption = Output.TEXT,
    run: RunOption = None,
) -> None:
    """Why the NodeClaim was or was not disrupted at --at: each method in the pass's order, with
    its cause (a do-not-disrupt pod, a PDB, a budget at 0 in its window, consolidateAfter, no
    cheaper replacement, pods that fit nowhere else, the node limit), under the feature gates the
    log recorded for the disruption service at that instant (a log older than that record: those
    of NODEWRIGHT_FEATURE_GATES, as the service reads them). Exit 2 on bad input."""
    _explain(name, None, at, from_file, seed, output, run)


def node(
    name: Annotated[str, typer.Argument(help="the Node's name: the NodeClaim it was registered for is explained")],
    at: AtOption = None,
    from_file: FromFileOption = None,
    seed: SeedOption = None,
    output: OutputOption = Output.TEXT,
    run: RunOption = None,
) -> None:
    """As `explain nodeclaim`, for the NodeClaim the Node was registered for."""
    _explain(None, name, at, from_file, seed, output, run)


def _explain(
    claim: str | None,
    node_name: str | None,
    at: str | None,
    from_file: Path | None,
    seed: int | None,
    output: Output,
    run: str | None,
) -> None:
    from cli import budgets as budgets_cmd
    from services.whatif.explain import ExplainError, explain
    from services.whatif.instant import Gates
    from shared.whatif.sim import UNKNOWN

    try:
        if from_file is not None and run is not None:
            raise ValueError("--run and --from-file: give one log, not both")
        environment = Gates.now()  # used only for a log that records no gates (older ones)
        instant = budgets_cmd.parse_instant(at, "--at") if at is not None else None
        events = read_events(from_file) if from_file is not None else None
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    sim = UNKNOWN
    if events is None:
        events, sim = with_database(database_log, run)
    try:
        answer = explain(events, claim, node=node_name, at=instant, sim=sim.given(seed), environment=environment)
    except ExplainError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    document = answer.model_dump(mode="json")
    if output == Output.JSON:
        typer.echo(json.dumps(document, indent=2))
    else:
        typer.echo(render(document))


def read_events(path: Path) -> list[RecordedEvent]:
    """The exported log as recorded events (the projection needs each one's schema version); a
    bad line is an error naming its number, the trailer and a repeated position are skipped."""
    from shared.policy.exported import TRAILER
    from shared.runtime.inputs import json_lines

    seen: set[int] = set()
    out: list[RecordedEvent] = []
    for number, row in json_lines(path):
        if isinstance(row, dict) and TRAILER in row:
            continue
        try:
            event = RecordedEvent.from_json_dict(row)
            if not isinstance(event.data, dict):
                raise ValueError("`data` is not an object")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise ValueError(f"{path}:{number}: not an exported event: {exc}") from None
        if event.position not in seen:
            seen.add(event.position)
            out.append(event)
    if not out:
        raise ValueError(f"{path}: holds no events")
    return sorted(out, key=lambda e: e.position)


async def database_events(url: str) -> list[RecordedEvent]:
    from cli.migrate import open_store

    store = await open_store(url)
    out: list[RecordedEvent] = []
    try:
        async for page in store.read_all(batch_size=10000):
            out.extend(page)
    finally:
        await store.close()
    return out


async def database_log(url: str) -> tuple[list[RecordedEvent], SimSettings]:
    """The log, and the sim settings its run's description keeps (`cli.whatif.database_log`)."""
    from shared.runtime.runs import described
    from shared.whatif.sim import from_description

    where, description = await described(url)
    return await database_events(url), from_description(description, where)


def render(doc: dict[str, Any]) -> str:
    """The answer for people: the verdict, then each method, the budgets, the decision."""
    head = f"nodeclaim {doc['nodeclaim']}"
    if doc["node"]:
        head += f" (node {doc['node']})"
    head += f" in nodepool {doc['nodepool']}, at {doc['at']}"
    if doc["position"]:
        head += f" (log position {doc['position']})"
    lines = [head]
    if doc["instance_type"]:
        lines.append(f"  {doc['instance_type']} ({doc['capacity_type']}) at {doc['price']:g}/h in the catalog")
        lines.append(f"  priced in the sim catalog at seed {doc['seed']} ({doc['seed_from']})")
    whence = f" ({doc['gates_from']})" if doc.get("gates_from") else ""
    if doc["gates"]:
        lines.append(f"  feature gates on: {', '.join(doc['gates'])}{whence}")
    elif whence:
        lines.append(f"  feature gates: all off{whence}")
    lines.append(f"  state: {doc['state']}")
    lines.append(f"verdict: {doc['verdict']}")
    if doc["causes"]:
        lines.append(f"causes: {', '.join(doc['causes'])}")
    if doc["methods"]:
        lines.append("methods, in the pass's order:")
    width = max([14, *(len(v[k]) + 1 for v in doc["methods"] for k in ("method", "reason"))])
    for v in doc["methods"]:
        mark = "disrupts" if v["disrupts"] else v["cause"]
        scope = "" if v["applies"] or v["disrupts"] else " (does not apply)"
        lines.append(f"  {v['method']:<{width}}{v['reason']:<{width}}{mark}{scope}: {v['message']}")
    for reason, b in doc["budgets"].items():
        allowed = "unbounded" if b["allowed"] is None else b["allowed"]
        windows = "; ".join(_window(w) for w in b["windows"])
        lines.append(
            f"  budget {reason}: allowed {allowed}, {b['disrupting']} of {b['nodes']} disrupting"
            + (f" ({windows})" if windows else "")
        )
    if doc["passed"]:
        lines.append("the whole pass at that instant decides:")
        lines.extend(
            f"  {c['reason']} of [{', '.join(c['candidates'])}] in {c['nodepool']}"
            + (f" -> {c['replacements']} replacement(s)" if c["replacements"] else "")
            for c in doc["passed"]
        )
    elif doc["methods"]:
        lines.append("the whole pass at that instant decides nothing")
    for d in doc["decisions"]:
        cancelled = f" (cancelled: {d['cancelled']})" if d["cancelled"] else ""
        lines.append(f"decision {d['decision_id']} at {d['at']}{cancelled}: {d['command']}")
        if d["budget_check"]:
            lines.append(f"  budget snapshot: {json.dumps(d['budget_check'], sort_keys=True)}")
    if doc["story"]:
        lines.append("story (audit --explain):")
        lines.extend(f"  {c['at']}  #{c['position']}  {c['text']}" for c in doc["story"])
    lines.extend(f"note: {n}" for n in doc["notes"])
    return "\n".join(lines)


def _window(w: dict[str, Any]) -> str:
    text = f"budget {w['budget']} nodes {w['nodes']!r}"
    if w["schedule"]:
        text += f", schedule {w['schedule']!r} for {w['duration']} in {w['time_zone']}"
    if w["start_local"]:
        text += f", window {w['start_local']} .. {w['end_local']}"
    return text
