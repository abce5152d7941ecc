"""`nodewright migrate`, `audit`, `replay` and the `events` group (`export`, `dead`): the event
log's schema, the log read back and checked, and the messages its consumers refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cli import audit as auditing
from cli import budgets as budgets_cmd
from cli import bus as on_bus
from cli.commands.options import Output, OutputOption
from cli.database import RunOption, with_bus, with_database
from cli.migrate import migrate as migrate_database
from cli.outputs import OutputError, check_file
from shared.config import signing_key
from shared.policy.anchors import read_heads
from shared.policy.digests import Signer
from shared.runtime import loop
from shared.runtime.inputs import read_json

events_app = typer.Typer(help="The event log.", no_args_is_help=True)

WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers", min=1, help="processes folding the log, split by NodePool (default: the cores available)"
    ),
]


def register(app: typer.Typer) -> None:
    app.add_typer(events_app, name="events")
    app.command()(migrate)
    events_app.command("export")(events_export)
    app.command()(audit)
    app.command()(replay)
    events_app.command("dead")(events_dead)


def migrate() -> None:
    """Create or upgrade the event store's tables (Alembic); a second run changes nothing."""
    typer.echo(with_database(migrate_database))


def events_export(
    file: Annotated[Path, typer.Argument(help="JSON Lines file to write")], run: RunOption = None
) -> None:
    """Write the whole log, one event per line, in position order. The file holds the log only:
    a run's sim seed, which `whatif` and `explain` need to replay it faithfully, is told here."""
    from shared.runtime.runs import described
    from shared.whatif.sim import SimSettings, from_description

    async def exported(url: str) -> tuple[int, SimSettings]:
        count = await auditing.export(url, file)
        where, description = await described(url)
        return count, from_description(description, where)

    _writable(lambda: check_file(file, "FILE"))
    count, sim = with_database(exported, run)
    typer.echo(f"exported {count} events to {file}")
    if sim.known:
        typer.echo(
            f"the run's sim seed is {sim.seed} (the file does not keep it): replay the file with"
            f" `whatif --from-file {file} --seed {sim.seed}`, `explain ... --from-file {file} --seed {sim.seed}`"
        )


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
        key = auditing.read_key(key_file) if key_file is not None else signing_key()
        signer = Signer(key) if key is not None else None
        if anchor is not None:
            anchored = read_heads(read_json(anchor))
        if from_file is not None:
            result = auditing.audit_file(from_file, explain, anchored, signer)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if from_file is None:
        settled = save_anchor is not None  # an anchor vouches only for a position no event may still commit below
        result = with_database(
            lambda url: auditing.audit_database(url, explain, workers, anchored, signer=signer, settled=settled), run
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
        typer.echo(auditing.render_audit(result))
    if explain and not result.replay.story:
        raise typer.Exit(2)
    raise typer.Exit(0 if result.ok else 1)


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
    folded, _, _ = with_database(lambda url: auditing.fold_database(url, until=instant, workers=workers), run)
    view = auditing.point_in_time(folded, instant)
    typer.echo(json.dumps(view, indent=2) if output == Output.JSON else auditing.render_point_in_time(view))


def events_dead(
    service: Annotated[str | None, typer.Option("--service", help="only this service's dead letters")] = None,
    output: OutputOption = Output.TEXT,
) -> None:
    """The messages consumers refused, oldest first, each with its reason."""
    letters = with_bus(lambda bus: loop.run(on_bus.dead_letters(bus.acting_as("cli"), service)))
    typer.echo(json.dumps(letters, indent=2) if output == Output.JSON else on_bus.render_dead_letters(letters))


def _writable(check: Callable[[], None]) -> None:
    """An output path checked before any work (`cli.outputs`); exit 2 when it cannot be written."""
    try:
        check()
    except OutputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
