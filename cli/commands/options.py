"""Options more than one command group takes, so each says `--output` the same way."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Output(StrEnum):
    TEXT = "text"
    JSON = "json"


OutputOption = Annotated[Output, typer.Option("--output", "-o", help="text or json")]
