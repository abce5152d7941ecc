"""A deployment's name: the rule the settings (`shared.config`) check and the bus's names
(`shared.bus.names`) build on. Its own module so the settings, below the bus, need not import it.
"""

from __future__ import annotations

import re

DEFAULT_DEPLOYMENT = "default"
_DEPLOYMENT = re.compile(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?")


class BadDeployment(ValueError):
    pass


def check_deployment(name: str) -> str:
    """A deployment name is a lowercase DNS label of at most 32 characters: it becomes a subject
    token, part of a stream name and of every user name."""
    if not _DEPLOYMENT.fullmatch(name):
        raise BadDeployment(
            f"NODEWRIGHT_DEPLOYMENT {name!r}: must be 1-32 lowercase letters, digits or '-',"
            " starting and ending with a letter or digit"
        )
    return name
