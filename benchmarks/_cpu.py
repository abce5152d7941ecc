"""CPU seconds spent while a block runs: this process's, and the whole machine's (Linux's
/proc/stat), so a benchmark can say what an event cost the client and what it cost the rest
(mostly PostgreSQL's backends). CPU per event moves less between runs and machines than
throughput does on a shared 2-core machine."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class CpuUse:
    client: float = 0.0
    rest: float | None = None  # None where /proc/stat cannot be read

    def per_event_us(self, events: int) -> str:
        client = f"client {self.client / events * 1e6:.0f} µs"
        if self.rest is None:
            return f"{client} per event"
        return f"{client}, rest {self.rest / events * 1e6:.0f} µs per event (mostly PostgreSQL)"


def _own() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine() -> float | None:
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


@contextmanager
def measured() -> Iterator[CpuUse]:
    use = CpuUse()
    own, machine = _own(), _machine()
    try:
        yield use
    finally:
        use.client = _own() - own
        after = _machine()
        if machine is not None and after is not None:
            use.rest = max(after - machine - use.client, 0.0)
