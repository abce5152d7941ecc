"""The event loop every nodewright process runs on.

uvloop where it is installed (Linux and macOS): the store's micro-batched appends spend about a
fifth of their client time in the loop and its transports, and uvloop roughly halves that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

try:
    import uvloop
except ImportError:  # pragma: no cover - Windows
    uvloop = None


def run(main: Coroutine[Any, Any, T]) -> T:
    if uvloop is None:  # pragma: no cover
        return asyncio.run(main)
    return uvloop.run(main)
