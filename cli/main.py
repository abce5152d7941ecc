"""The `nodewright` command line: the typer app, with each group of commands registered from its
module in `cli.commands`, in the order `nodewright --help` lists them. Exit codes:
`cli.failures` (0 ok, 1 invalid or a violation, 2 unusable input or usage, 3 internal error, a
service process that died included)."""

from __future__ import annotations

from cli import explain
from cli.commands import budgets, bus, delete, eventlog, run, runs, service, validate, whatif
from cli.failures import CLI

app = CLI(
    name="nodewright",
    help="A Karpenter-compatible node lifecycle controller with strict limits and budgets.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """nodewright: Karpenter's NodePool API with limits and budgets that hold exactly."""


for group in (validate, budgets, eventlog, bus, delete, run, runs, service, whatif, explain):
    group.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
