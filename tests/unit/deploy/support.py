"""What the deployment tests share: the repository's files, and a command line resolved against
the `nodewright` typer app as the shell would run it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer.main
import yaml

from cli.main import app

try:  # typer 0.2x carries its own click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - a typer on the click package
    from click.exceptions import UsageError  # type: ignore[assignment,no-redef]

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

SERVICES = ("relay", "watcher", "scheduler", "disruption", "termination", "sim")
"""Every long-running service, each a `nodewright service NAME` of its own."""
HEALTH_PORT, METRICS_PORT = 8081, 8080


def resolve(argv: Sequence[str]) -> tuple[list[str], Any]:
    """The `nodewright` subcommand path `argv` runs (`["service", "scheduler"]`) and its parsed
    context: the typer app's own command tree and parser, so an unknown command or option, a
    missing required option or a bad value raises `UsageError` as the container's command would."""
    if not argv or Path(argv[0]).name != "nodewright":
        raise UsageError(f"not a nodewright command: {list(argv)}")
    command: Any = typer.main.get_command(app)
    ctx = command.context_class(command, info_name="nodewright")
    path: list[str] = []
    rest = list(argv[1:])
    while hasattr(command, "list_commands"):  # a group: the next word names its subcommand
        if not rest or rest[0].startswith("-"):
            raise UsageError(f"{' '.join(['nodewright', *path])} needs a subcommand: {list(argv)}")
        name = rest.pop(0)
        sub = command.get_command(ctx, name)
        if sub is None:
            raise UsageError(f"{' '.join(['nodewright', *path])} has no subcommand {name!r}")
        path.append(name)
        command = sub
        if hasattr(command, "list_commands"):
            ctx = command.context_class(command, info_name=name, parent=ctx)
    return path, command.make_context(path[-1], rest, parent=ctx)


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
