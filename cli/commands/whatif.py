"""`nodewright whatif`: a recorded log's demand replayed offline against changed NodePools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.commands.options import Output, OutputOption
from cli.database import RunOption, with_database

SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="the recorded run's scenario seed (it draws the sim's prices); default: the run's description"
        " records it, an exported file does not (then 0, and the fidelity says so)",
    ),
]

JSON_KEYS = ("fidelity", "baseline", "changed", "seconds")


def register(app: typer.Typer) -> None:
    app.command()(whatif)


def whatif(
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="an exported JSONL log (`events export`) instead of a run")
    ] = None,
    nodepool: Annotated[
        list[Path] | None,
        typer.Option("--nodepool", help="a changed or added NodePool (YAML); repeatable", metavar="FILE"),
    ] = None,
    drop: Annotated[list[str] | None, typer.Option("--drop", help="a NodePool to remove; repeatable")] = None,
    since: Annotated[str | None, typer.Option("--from", help="replay from this instant (RFC 3339)")] = None,
    until: Annotated[str | None, typer.Option("--to", help="replay up to this instant (RFC 3339)")] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="write whatif.png and whatif.json here", metavar="DIR")
    ] = None,
    seed: SeedOption = None,
    output: OutputOption = Output.TEXT,
    run: RunOption = None,
) -> None:
    """Replay a run's recorded demand twice, offline, through the same scheduling, disruption and
    termination code: once with the recorded NodePools, once with the changed ones; print how
    faithful the first is to the record, then both side by side per pool. Both play by the feature
    gates the log recorded in force at the replay's start (a log older than that record: those of
    NODEWRIGHT_FEATURE_GATES), and the fidelity says which. Exit 2 on bad input."""
    from cli import budgets as budgets_cmd
    from cli import whatif as told
    from cli.outputs import OutputError, check_directory
    from services.whatif.replay import whatif as replay
    from shared.api.scenario import ScenarioError
    from shared.config import gates_now
    from shared.whatif.changes import ChangeError
    from shared.whatif.demand import DemandError
    from shared.whatif.sim import UNKNOWN

    try:
        if from_file is not None and run is not None:
            raise ValueError("--run and --from-file: give one log, not both")
        start = budgets_cmd.parse_instant(since, "--from") if since else None
        end = budgets_cmd.parse_instant(until, "--to") if until else None
        if start is not None and end is not None and start >= end:
            raise ValueError(f"--from {since} is not before --to {until}")
        changes = told.read_nodepools(nodepool or [])
        environment = gates_now()  # used only for a log that records no gates (older ones)
        if report is not None:
            check_directory(report, "--report", ("whatif.png", "whatif.json"))
        entries = told.read_log(from_file) if from_file is not None else None
    except (OSError, ValueError, OutputError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    sim = UNKNOWN
    if entries is None:
        entries, sim = with_database(told.database_log, run)
    try:
        result = replay(
            entries, changes, drop or [], start=start, end=end, sim=sim.given(seed), environment=environment
        )
    except (ChangeError, DemandError, ScenarioError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if report is not None:
        for path in told.write_report(report, {k: v for k, v in result.items() if k != "series"}, result["series"]):
            typer.echo(f"wrote {path}", err=output == Output.JSON)
    if output == Output.JSON:
        typer.echo(json.dumps({k: result[k] for k in JSON_KEYS}, indent=2))
    else:
        typer.echo(told.render(result))
