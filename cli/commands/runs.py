"""`nodewright report DIR` and `nodewright runs`: a finished run's report rebuilt, and the runs
kept on the server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from cli.database import RunOption, with_database
from shared.runtime.runs import Run


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("runs")(runs)


def report(
    directory: Annotated[Path, typer.Argument(help="where nodes.png, report.md and summary.json go")],
    run: RunOption = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="an exported JSONL log instead of a database")
    ] = None,
) -> None:
    """Rebuild a run's report from its database (`--run NAME`, default: the configured database)
    or from an exported log (`--from-file`). Exit 1 when the audit finds a violation."""
    from cli import report as reporting
    from cli.outputs import OutputError, check_directory

    if from_file is not None and run is not None:
        typer.echo("error: give --run or --from-file, not both", err=True)
        raise typer.Exit(2)
    try:
        check_directory(directory, "DIRECTORY", reporting.FILES)
    except OutputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if from_file is not None:
        try:
            summary, timeline, events = reporting.from_file(from_file)
        except (OSError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    else:

        async def told(url: str) -> Any:
            kept = await _described(url, run)
            name = kept.scenario if kept else make_url(url).database or "log"
            return await reporting.from_database(url, name, kept.score if kept else None)

        summary, timeline, events = with_database(told, run)
    if not events:
        typer.echo("error: the log holds no events: there is nothing to report", err=True)
        raise typer.Exit(2)
    try:
        paths = reporting.write(directory, summary, timeline, events)
    except OSError as exc:
        typer.echo(f"error: cannot write the report: {exc}", err=True)
        raise typer.Exit(2) from None
    for path in paths:
        typer.echo(f"wrote {path}")
    raise typer.Exit(0 if summary["audit_ok"] else 1)


async def _described(url: str, run: str | None) -> Run | None:
    """The run's description (its scenario, what the sim counted), when the log is a run's."""
    from shared.runtime import runs

    name = make_url(url).database
    return next((r for r in await runs.listed(url) if r.name == name), None) if run else None


def runs(
    drop: Annotated[str | None, typer.Option("--drop", help="delete this run's database")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text",
) -> None:
    """The runs `nodewright run` kept on the server, oldest first, each on a database of its own."""
    from shared.runtime import runs as kept

    if output not in ("text", "json"):
        typer.echo(f"error: --output must be text or json, not {output!r}", err=True)
        raise typer.Exit(2)
    if drop is not None:
        with_database(lambda url: kept.drop(url, drop))
        typer.echo(f"dropped {drop}")
        return
    listed = with_database(kept.listed)
    if output == "json":
        typer.echo(json.dumps([r.__dict__ for r in listed], indent=2))
        return
    if not listed:
        typer.echo("no runs yet: `nodewright run SCENARIO` makes one")
        return
    table = Table("run", "scenario", "started", "events", "NodeClaims", "audit")
    for r in listed:
        s = r.summary
        audit = "-" if "audit_ok" not in s else ("OK" if s["audit_ok"] else "VIOLATIONS")
        table.add_row(
            r.name, r.scenario, r.started[:19], str(s.get("events", "-")), str(s.get("nodeclaims_created", "-")), audit
        )
    Console().print(table)
