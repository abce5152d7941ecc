"""`nodewright delete nodeclaim`: NodeClaims asked to go, as `kubectl delete` asks Karpenter."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import delete as deleting
from cli.database import with_database
from shared.config import signing_key

delete_app = typer.Typer(help="Delete NodeClaims, as kubectl delete does for Karpenter.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(delete_app, name="delete")
    delete_app.command("nodeclaim")(delete_nodeclaim)


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
        deleted = with_database(lambda url: deleting.delete_nodeclaims(url, names, clock.now(), key))
    except deleting.NotFoundError as exc:
        typer.echo(f"Error from server (NotFound): {exc}", err=True)
        raise typer.Exit(2) from None
    for name in deleted:
        typer.echo(f'nodeclaim.karpenter.sh "{name}" deleted')
    if wait:
        left = with_database(lambda url: deleting.wait_terminated(url, deleted, timeout))
        if left:
            typer.echo(f"error: still terminating after {timeout:.0f} s: {', '.join(left)}", err=True)
            raise typer.Exit(1)
        typer.echo(f"terminated: {', '.join(deleted)}")
