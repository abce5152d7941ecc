"""The clock a running `nodewright up` shares with its processes, for commands run beside it.

`up` writes its accelerated clock to `<data dir>/clock.json` while it runs; a command that
records a decision (`nodewright delete nodeclaim`) reads the same instant from it, so the
request's time is the system's simulated time, as a deletion timestamp is the API server's.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from shared.clock import AcceleratedClock, Clock, SystemClock
from shared.config import Settings

FILE = "clock.json"


def write_clock(data_dir: Path, clock: AcceleratedClock) -> Path:
    path = data_dir / FILE
    path.write_text(json.dumps({"start": clock.start.isoformat(), "speed": clock.speed, "origin": clock.origin}))
    return path


def shared_clock(config: Settings) -> Clock:
    """The clock the environment gives, else a running `up`'s, else the wall clock."""
    if config.clock_start is not None:
        return config.clock()
    path = config.data_dir / FILE
    try:
        raw = json.loads(path.read_text())
        return AcceleratedClock(datetime.fromisoformat(raw["start"]), float(raw["speed"]), float(raw["origin"]))
    except (OSError, ValueError, KeyError, TypeError):
        return SystemClock()
