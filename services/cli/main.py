"""The `nodewright` command line. Exit codes: `services.cli.failures` (0 ok, 1 invalid or a
violation, 2 unusable input or usage, 3 internal error, a service process that died included)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import pydantic
import typer

from services.cli import budgets as budgets_cmd
from services.cli import describe as describe_cmd
from services.cli import eventlog, runs_cmd
from services.cli import validate as validate_cmd
from services.cli.database import RunOption, settings_or_exit, with_database
from services.cli.failures import CLI
from services.cli.outputs import OutputError, check_file
from services.cli.service import service_app
from shared.api.documents import DocumentError
from shared.config import setting_error, signing_key
from shared.policy.anchors import read_heads
from shared.policy.digests import Signer
from shared.redaction import redact
from shared.runtime import logs, loop
from shared.runtime.inputs import InputError, limits_now, read_json
from shared.runtime.logs import LogFormatOption

if TYPE_CHECKING:
    from shared.runtime.bus import LocalBus

T = TypeVar("T")

app = CLI(
    name="nodewright",
    help="A Karpenter-compatible node lifecycle controller with strict limits and budgets.",
    no_args_is_help=True,
    add_completion=False,
)


class Output(StrEnum):
    TEXT = "text"
    JSON = "json"


@app.callback()
def _root() -> None:
    """nodewright: Karpenter's NodePool API with limits and budgets that hold exactly."""


OutputOption = Annotated[Output, typer.Option("--output", "-o", help="text or json")]


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="NodePool YAML files (multi-document allowed)")],
    output: OutputOption = Output.TEXT,
) -> None:
    """Validate NodePools as Karpenter's API server would: exit 0 valid, 1 invalid, 2 unreadable."""
    try:
        reports = validate_cmd.check_files(files)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if output == Output.JSON:
        typer.echo(validate_cmd.render_json(reports))
    else:
        out, err = validate_cmd.render_text(reports)
        if out:
            typer.echo(out)
        if err:
            typer.echo(err, err=True)
    raise typer.Exit(validate_cmd.exit_code(reports))


@app.command()
def describe(files: Annotated[list[Path], typer.Argument(help="NodePool YAML files")]) -> None:
    """Print each NodePool's disruption budgets and limits."""
    from rich.console import Console

    try:
        describe_cmd.describe_files(files, Console(width=140))
    except (InputError, DocumentError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
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


events_app = typer.Typer(help="The event log.", no_args_is_help=True)
app.add_typer(events_app, name="events")


@app.command()
def migrate() -> None:
    """Create or upgrade the event store's tables (Alembic); a second run changes nothing."""
    typer.echo(with_database(eventlog.migrate))


@events_app.command("export")
def events_export(
    file: Annotated[Path, typer.Argument(help="JSON Lines file to write")], run: RunOption = None
) -> None:
    """Write the whole log, one event per line, in position order."""
    _writable(lambda: check_file(file, "FILE"))
    count = with_database(lambda url: eventlog.export(url, file), run)
    typer.echo(f"exported {count} events to {file}")


WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers", min=1, help="processes folding the log, split by NodePool (default: the cores available)"
    ),
]


@app.command()
def audit(
    output: OutputOption = Output.TEXT,
    explain: Annotated[
        str | None, typer.Option("--explain", help="tell one claim's story: nodeclaim-<name>", metavar="STREAM_ID")
    ] = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="audit an exported JSONL log instead of the database")
    ] = None,
    workers: WorkersOption = None,
    anchor: Annotated[
        Path | None,
        typer.Option("--anchor", help="fail if the log was cut back or rewritten before this saved anchor"),
    ] = None,
    save_anchor: Annotated[
        Path | None, typer.Option("--save-anchor", help="write the log's heads here, to keep elsewhere")
    ] = None,
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            help="verify each event's signature with the key in this file (default: NODEWRIGHT_SIGNING_KEY)",
        ),
    ] = None,
    run: RunOption = None,
) -> None:
    """Replay the log: re-check every launch against the limits then in force and every disruption
    against the budgets active at its time; compare the counters; verify the hash chain and, given
    the signing key, every event's signature. Exit 1 on any violation."""
    anchored = None
    if save_anchor is not None:
        _writable(lambda: check_file(save_anchor, "--save-anchor"))
    try:
        key = eventlog.read_key(key_file) if key_file is not None else signing_key()
        signer = Signer(key) if key is not None else None
        if anchor is not None:
            anchored = read_heads(read_json(anchor))
        if from_file is not None:
            result = eventlog.audit_file(from_file, explain, anchored, signer)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if from_file is None:
        settled = save_anchor is not None  # an anchor vouches only for a position no event may still commit below
        result = with_database(
            lambda url: eventlog.audit_database(url, explain, workers, anchored, signer=signer, settled=settled), run
        )
    if save_anchor is not None:
        try:
            save_anchor.write_text(json.dumps(result.anchor(), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            typer.echo(f"error: cannot write the anchor: {exc}", err=True)
            raise typer.Exit(2) from None
    if output == Output.JSON:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        typer.echo(eventlog.render_audit(result))
    if explain and not result.replay.story:
        raise typer.Exit(2)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def replay(
    at: Annotated[str, typer.Option("--at", help="instant (RFC 3339, or 'now')")],
    output: OutputOption = Output.TEXT,
    workers: WorkersOption = None,
    run: RunOption = None,
) -> None:
    """Each NodePool's counters and the spec in force at --at, rebuilt from the log."""
    from datetime import UTC, datetime

    try:
        instant = budgets_cmd.parse_instant(at, "--at", now=datetime.now(UTC))
    except budgets_cmd.UsageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    folded, _, _ = with_database(lambda url: eventlog.fold_database(url, until=instant, workers=workers), run)
    view = eventlog.point_in_time(folded, instant)
    typer.echo(json.dumps(view, indent=2) if output == Output.JSON else eventlog.render_point_in_time(view))


@app.command()
def relay(
    once: Annotated[bool, typer.Option("--once", help="publish what is there, then stop")] = False,
    port: Annotated[int | None, typer.Option("--port", help="serve /healthz, /readyz and /metrics here")] = None,
) -> None:
    """Run the outbox relay: committed events onto the deployment's stream (`--once`: publish
    what is committed now, then stop)."""
    if not once:  # the service itself, in this process
        os.execv(sys.executable, [sys.executable, "-m", "services.relay", *(["--port", str(port)] if port else [])])
    count = _with_bus(lambda bus: with_database(lambda url: eventlog.relay_once(url, bus.acting_as("relay"))))
    typer.echo(f"published {count} events")


@events_app.command("dead")
def events_dead(
    service: Annotated[str | None, typer.Option("--service", help="only this service's dead letters")] = None,
    output: OutputOption = Output.TEXT,
) -> None:
    """The messages consumers refused, oldest first, each with its reason."""
    letters = _with_bus(lambda bus: loop.run(eventlog.dead_letters(bus.acting_as("cli"), service)))
    typer.echo(json.dumps(letters, indent=2) if output == Output.JSON else eventlog.render_dead_letters(letters))


bus_app = typer.Typer(help="The bus: the deployment's streams and consumers.", no_args_is_help=True)
app.add_typer(bus_app, name="bus")


@bus_app.command("setup")
def bus_setup(
    replicas: Annotated[
        int | None, typer.Option("--replicas", min=1, max=5, help="copies of each message (NODEWRIGHT_STREAM_REPLICAS)")
    ] = None,
) -> None:
    """Make the deployment's streams and its work consumers, as its setup user (or an admin):
    once per deployment before its services start, and again after an upgrade, as `migrate` does
    the schema. No service may make them itself. Exit 2 when it cannot."""
    from shared.bus.setup import set_up

    config = settings_or_exit()
    made = _with_bus(
        lambda bus: loop.run(
            set_up(
                bus.acting_as("setup"),
                replicas=replicas or config.stream_replicas,
                ack_wait=config.termination_ack_wait,
            )
        )
    )
    typer.echo(f"streams {', '.join(made.streams)}; pull consumers {', '.join(made.consumers)}: set up")


@app.command()
def asyncapi(
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
) -> None:
    """Print the AsyncAPI document of the bus (faststream's, from the event contracts)."""
    from shared.bus.asyncapi import render
    from shared.bus.names import BusNames
    from shared.config import settings

    if output not in ("yaml", "json"):
        typer.echo(f"error: --output must be yaml or json, not {output!r}", err=True)
        raise typer.Exit(2)
    typer.echo(render(BusNames(settings().deployment), json=output == "json"), nl=False)


def _writable(check: Callable[[], None]) -> None:
    """An output path checked before any work (`services.cli.outputs`); exit 2 when it cannot be written."""
    try:
        check()
    except OutputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _with_bus(work: Callable[[LocalBus], T]) -> T:
    """Run `work` on NODEWRIGHT_NATS_URL, else on an embedded nats-server; exit 2 when the bus
    cannot be reached within NODEWRIGHT_CONNECT_TIMEOUT or refuses this identity."""
    import nats.errors

    from services.cli.database import bus_answers
    from shared.deployment import BadDeployment
    from shared.runtime.bus import local_bus

    config = settings_or_exit()
    try:
        with local_bus(config) as bus:
            loop.run(bus_answers(bus.acting_as("cli"), "cli", config.connect_timeout))
            return work(bus)
    except typer.Exit:
        raise
    except (OSError, RuntimeError, BadDeployment, nats.errors.Error, pydantic.ValidationError) as exc:
        typer.echo(f"error: {redact(str(exc)) or type(exc).__name__}", err=True)
        raise typer.Exit(2) from None


delete_app = typer.Typer(help="Delete NodeClaims, as kubectl delete does for Karpenter.", no_args_is_help=True)
app.add_typer(delete_app, name="delete")


@delete_app.command("nodeclaim")
def delete_nodeclaim(
    names: Annotated[list[str], typer.Argument(help="NodeClaim names")],
    wait: Annotated[bool, typer.Option("--wait", help="return once every one is terminated")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.0, help="the longest --wait waits, seconds")] = 600.0,
) -> None:
    """Ask for NodeClaims to go: each is drained gracefully (PDBs, do-not-disrupt, its pool's
    terminationGracePeriod) and its instance deleted. Exit 2 when one is not found (nothing is
    then asked), 1 when --wait runs out."""
    from shared.config import settings
    from shared.runtime.clockfile import shared_clock

    try:
        key = signing_key()  # what this command appends is signed, as the services' appends are
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    clock = shared_clock(settings())
    try:
        deleted = with_database(lambda url: eventlog.delete_nodeclaims(url, names, clock.now(), key))
    except eventlog.NotFoundError as exc:
        typer.echo(f"Error from server (NotFound): {exc}", err=True)
        raise typer.Exit(2) from None
    for name in deleted:
        typer.echo(f'nodeclaim.karpenter.sh "{name}" deleted')
    if wait:
        left = with_database(lambda url: eventlog.wait_terminated(url, deleted, timeout))
        if left:
            typer.echo(f"error: still terminating after {timeout:.0f} s: {', '.join(left)}", err=True)
            raise typer.Exit(1)
        typer.echo(f"terminated: {', '.join(deleted)}")


@contextlib.contextmanager
def _system_errors() -> Iterator[None]:
    """A bad scenario, an output path that cannot be written, a bad setting or a server that does
    not answer exit 2; a service process that did not start exits 3 (an internal error: its own
    log says why); each says why."""
    from services.cli.children import ChildExited
    from services.cli.database import Unreachable
    from services.cli.local_cluster import ApplyFailed
    from shared.api.scenario import ScenarioError
    from shared.bus.setup import SetUpFailed
    from shared.runtime.runs import RunError

    try:
        yield
    except (ScenarioError, RunError, OutputError, Unreachable, SetUpFailed, ApplyFailed) as exc:
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
    from services.cli.run import restart_lines

    died = restart_lines(view.get("restarts") or {})
    for line in died:
        typer.echo(f"error: {line}", err=True)
    if died:
        typer.echo(f"error: a service process died during {what}: it was not a clean run", err=True)
    return 3 if died else 0


@app.command("up")
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
    log_format: LogFormatOption = None,
) -> None:
    """Run the whole system here: servers (embedded unless NODEWRIGHT_*_URL), migrations, the sim,
    the watcher, the scheduler and the relay as separate processes, and a live view. Ctrl-C stops
    everything. Exit 3 when a service process died meanwhile (each is said, with why)."""
    from services.cli import up
    from shared.config import settings

    logs.for_command(log_format)
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


@app.command("run")
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
    log_format: LogFormatOption = None,
) -> None:
    """Play a scenario to its end with every service (as `up` does) on a log of its own, audit
    the log, stop, and summarise. Exit 1 when the audit finds a violation, else 3 when a service
    process died during the run (the summary's `restarts` says which, how often and why), else 2
    when the report could not be written."""
    from services.cli import run
    from shared.config import settings

    logs.for_command(log_format)
    with _system_errors():
        summary = run.run(settings(), scenario, speed, report_dir=report)
    typer.echo(json.dumps(summary, indent=2) if output == Output.JSON else run.render(summary))
    _said_restarts(summary, "the run")
    if summary.get("report_error"):
        typer.echo(f"error: {summary['report_error']}", err=True)
    raise typer.Exit(run.exit_code(summary))


app.command("report")(runs_cmd.report)
app.command("runs")(runs_cmd.runs)
app.add_typer(service_app, name="service")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
