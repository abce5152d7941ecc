"""`nodewright up` and `run`: the whole system on this machine, every service its own process,
either until Ctrl-C (with a live view) or until a scenario has played out (then audited and
summarised)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pydantic
import typer

from cli.commands.options import CloudOption, Output, OutputOption, choose_cloud
from cli.outputs import OutputError
from shared.config import setting_error
from shared.redaction import redact
from shared.runtime import logs
from shared.runtime.logs import LogFormatOption


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
    app.command("run")(run_command)


@contextlib.contextmanager
def _system_errors() -> Iterator[None]:
    """A bad scenario, an output path that cannot be written, a bad setting or a server that does
    not answer exit 2; a service process that did not start exits 3 (an internal error: its own
    log says why); each says why."""
    from cli.children import ChildExited
    from cli.cloud import CloudRefused
    from cli.database import Unreachable
    from cli.local_cluster import ApplyFailed
    from shared.api.scenario import ScenarioError
    from shared.bus.setup import SetUpFailed
    from shared.runtime.runs import RunError

    try:
        yield
    except (ScenarioError, RunError, OutputError, Unreachable, SetUpFailed, ApplyFailed, CloudRefused) as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    except pydantic.ValidationError as exc:  # a bad setting: named, its value never shown
        typer.echo(f"error: {redact(setting_error(exc))}", err=True)
        raise typer.Exit(2) from None
    except ChildExited as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(3) from None


def _said_restarts(view: dict, what: str) -> int:
    """At the end of `up` or `run`: each process that died, on stderr; 3 when one did, else 0."""
    from cli.run import restart_lines

    died = restart_lines(view.get("restarts") or {})
    for line in died:
        typer.echo(f"error: {line}", err=True)
    if died:
        typer.echo(f"error: a service process died during {what}: it was not a clean run", err=True)
    return 3 if died else 0


def up_command(
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="a Scenario file to play (default: empty)")
    ] = None,
    speed: Annotated[float, typer.Option("--speed", min=0.001, help="simulated seconds per wall second")] = 60.0,
    run_for: Annotated[
        float | None, typer.Option("--for", min=0.0, help="stop after this many wall seconds (default: Ctrl-C)")
    ] = None,
    live: Annotated[bool, typer.Option("--live/--no-live", help="the live view (off: one summary at the end)")] = True,
    base_port: Annotated[
        int | None, typer.Option("--base-port", help="health/metrics ports from here, one per process (default: free)")
    ] = None,
    cloud: CloudOption = None,
    log_format: LogFormatOption = None,
) -> None:
    """Run the whole system here: servers (embedded unless NODEWRIGHT_*_URL), migrations, the sim,
    the watcher, the scheduler and the relay as separate processes, and a live view. Ctrl-C stops
    everything. Exit 3 when a service process died meanwhile (each is said, with why)."""
    from cli import up
    from shared.config import settings

    logs.for_command(log_format)
    choose_cloud(cloud)
    view: dict = {}
    try:
        with _system_errors():
            view, _ = up.up(
                settings(), scenario, speed, run_for=run_for, live=live and sys.stdout.isatty(), base_port=base_port
            )
    except KeyboardInterrupt:
        pass
    typer.echo("stopped: every process and server is down")
    raise typer.Exit(_said_restarts(view, "up"))


def run_command(
    scenario: Annotated[Path, typer.Argument(help="the Scenario file to play")],
    speed: Annotated[
        float | None,
        typer.Option("--speed", min=0.001, help="simulated seconds per wall second (default: ~60 s of wall time)"),
    ] = None,
    output: OutputOption = Output.TEXT,
    report: Annotated[
        Path | None, typer.Option("--report", help="write nodes.png, report.md and summary.json here")
    ] = None,
    cloud: CloudOption = None,
    log_format: LogFormatOption = None,
) -> None:
    """Play a scenario to its end with every service (as `up` does) on a log of its own, audit
    the log, stop, and summarise. Exit 1 when the audit finds a violation, else 3 when a service
    process died during the run (the summary's `restarts` says which, how often and why), else 2
    when the report could not be written."""
    from cli import run
    from shared.config import settings

    logs.for_command(log_format)
    choose_cloud(cloud)
    with _system_errors():
        summary = run.run(settings(), scenario, speed, report_dir=report)
    typer.echo(json.dumps(summary, indent=2) if output == Output.JSON else run.render(summary))
    _said_restarts(summary, "the run")
    if summary.get("report_error"):
        typer.echo(f"error: {summary['report_error']}", err=True)
    raise typer.Exit(run.exit_code(summary))
