"""`nodewright validate`: NodePool and EC2NodeClass files checked as Karpenter's API server would
check them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli import validate as validate_cmd
from cli.commands.options import Output, OutputOption
from shared.runtime.inputs import InputError


def register(app: typer.Typer) -> None:
    app.command()(validate)


def validate(
    files: Annotated[list[Path], typer.Argument(help="NodePool and EC2NodeClass YAML files (multi-document allowed)")],
    output: OutputOption = Output.TEXT,
) -> None:
    """Validate NodePools and EC2NodeClasses as Karpenter's API server would: exit 0 valid, 1
    invalid, 2 unreadable."""
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
