"""The `nodewright` command line."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from services.cli import describe as describe_cmd
from services.cli import validate as validate_cmd
from shared.api.documents import DocumentError

app = typer.Typer(
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
    reports = validate_cmd.check_files(files)
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
        describe_cmd.describe_files(files, Console())
    except (OSError, DocumentError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
