"""`nodewright describe` and `budgets`: what a NodePool file's disruption budgets and limits
allow, read from the file alone (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli import budgets as budgets_cmd
from cli import describe as describe_cmd
from cli.commands.options import Output, OutputOption
from shared.api.documents import DocumentError
from shared.runtime.inputs import InputError, limits_now


def register(app: typer.Typer) -> None:
    app.command()(describe)
    app.command()(budgets)


def describe(files: Annotated[list[Path], typer.Argument(help="NodePool YAML files")]) -> None:
    """Print each NodePool's disruption budgets and limits."""
    from rich.console import Console

    try:
        describe_cmd.describe_files(files, Console(width=140))
    except (InputError, DocumentError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def budgets(
    file: Annotated[Path, typer.Argument(help="NodePool YAML file")],
    nodes: Annotated[int, typer.Option("--nodes", min=0, help="nodes the pool has (they count for % budgets)")],
    nodepool: Annotated[str | None, typer.Option("--nodepool", help="only this NodePool")] = None,
    at: Annotated[str | None, typer.Option("--at", help="instant (RFC 3339, or 'now')")] = None,
    start: Annotated[str | None, typer.Option("--from", help="calendar start (RFC 3339)")] = None,
    end: Annotated[str | None, typer.Option("--to", help="calendar end (RFC 3339)")] = None,
    disrupting: Annotated[int, typer.Option("--disrupting", min=0, help="nodes already disrupting")] = 0,
    output: OutputOption = Output.TEXT,
) -> None:
    """Allowed disruptions per reason at --at, or the budget calendar from --from to --to."""
    from datetime import UTC, datetime

    from rich.console import Console

    try:
        if (at is None) == (start is None and end is None) or (start is None) != (end is None):
            raise budgets_cmd.UsageError("give either --at, or both --from and --to")
        pools = budgets_cmd.select(describe_cmd.nodepools_in(file), nodepool)
        if at is not None:
            instant = budgets_cmd.parse_instant(at, "--at", now=datetime.now(UTC))
            reports = [budgets_cmd.point_report(p, instant, nodes, disrupting) for p in pools]
        else:
            t1 = budgets_cmd.parse_instant(start or "", "--from")
            t2 = budgets_cmd.parse_instant(end or "", "--to")
            limits = limits_now()
            budgets_cmd.calendar_span(t1, t2, limits.max_calendar_days)
            reports = budgets_cmd.calendar_reports(pools, t1, t2, nodes, limits.max_calendar_windows)
    except (InputError, DocumentError, budgets_cmd.UsageError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if output == Output.JSON:
        typer.echo(budgets_cmd.render_json(reports))
        return
    console = Console(width=160)
    show = budgets_cmd.print_point if at is not None else budgets_cmd.print_calendar
    for report in reports:
        show(console, report)
