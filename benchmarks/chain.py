"""What the log's hash chain costs (issue 21), old against new, alternately in one run: the
micro-batched append with and without it (`write_batch(chained=False)`: the write before the
chain, hashing nothing), and the audit replay with and without verifying it; beside them, the
audit of the same log as the writer before the current digest form made it (form 2).
`python -m benchmarks.chain [--events N] [--replay N] [--rounds N]`; the rest of the store's
figures are `benchmarks.store`'s, whose workload and log this reuses.

Each round runs old and new back to back, and the ratio quoted is the median of the rounds'
ratios: on a shared 2-core machine throughput moves by 2x within minutes, and a pair measured
together moves together. Beside it, the CPU each event cost: the client's and (appends, with
PostgreSQL on this machine) the store's backends', which noise moves much less."""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import asyncpg

from benchmarks._batcher import AppendBatcher
from benchmarks._db import bench_database
from benchmarks.store import FLUSHERS, WRITERS, apply_pools, drive, load_log, replay_db, synthetic_log
from shared.config import driver_params
from shared.policy.audit import Replay
from shared.policy.chain import LogChain
from shared.policy.digests import WRITER_JSON
from shared.runtime import loop
from shared.store import write as writes
from shared.store.eventstore import EventStore


def _own_cpu() -> float:
    """This process's CPU seconds and its reaped children's (an audit's worker processes)."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


async def _backends_cpu(probe: asyncpg.Connection) -> float | None:
    """CPU seconds of the database's client backends so far (but the probe's), from /proc: None
    when PostgreSQL runs elsewhere."""
    pids = await probe.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'"
        " AND pid <> pg_backend_pid()"
    )
    total = 0.0
    for (pid,) in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as stat:
                total += int(stat.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return None
    return total


Round = tuple[float, float, float | None]
"""events/s, client µs/event, the backends' µs/event (None: PostgreSQL elsewhere)."""


async def chain_cost_appends(url: str, total: int, rounds: int = 3) -> dict[str, list[Round]]:
    """Micro-batched appends with the chained write and with the write before it, alternately in
    one process and one database: per round (events/s, client µs/event, backends' µs/event)."""
    store = EventStore.connect(url, pool_size=8)
    await apply_pools(store)
    batcher = AppendBatcher(store, max_batch=400, flushers=FLUSHERS)
    probe = await asyncpg.connect(**driver_params(url))
    chained = writes.write_batch
    variants = {"chained": chained, "unchained": functools.partial(chained, chained=False)}
    out: dict[str, list[Round]] = {name: [] for name in variants}
    try:
        await drive(batcher.append, 4000, WRITERS)  # warm up: connections, prepared statements
        for _ in range(rounds):
            for name, write in variants.items():
                writes.write_batch = write  # type: ignore[assignment]
                client, backends = _own_cpu(), await _backends_cpu(probe)
                seconds, _ = await drive(batcher.append, total, WRITERS)
                client, after = _own_cpu() - client, await _backends_cpu(probe)
                server = (after - backends) / total * 1e6 if after is not None and backends is not None else None
                out[name].append((total / seconds, client / total * 1e6, server))
    finally:
        writes.write_batch = chained
        await probe.close()
        await batcher.close()
        await store.close()
    return out


def _per_event(rows: list[Round]) -> str:
    client = statistics.median(r[1] for r in rows)
    servers = [r[2] for r in rows if r[2] is not None]
    server = f", backends {statistics.median(servers):.1f}" if servers else ""
    return f"client {client:.1f}{server} µs/event"


def chain_figures(events: int, replay: int, rounds: int = 3) -> dict[str, object]:
    """What the hash chain costs, old against new, alternately in the same run: micro-batched
    appends (the write with and without it) and the audit replay (with and without verifying)."""
    with bench_database() as url:
        appended = loop.run(chain_cost_appends(url, events, rounds))
    chained, plain = appended["chained"], appended["unchained"]
    ratio = statistics.median(a[0] / b[0] for a, b in zip(chained, plain, strict=True))
    print(
        "hash chain, micro-batched appends: "
        + ", ".join(f"{a[0]:,.0f}/{b[0]:,.0f}" for a, b in zip(chained, plain, strict=True))
        + f" events/s chained/unchained in {rounds} alternating rounds; median ratio {ratio:.2f}x (goal >= 0.90x)"
    )
    print(f"  chained: {_per_event(chained)}; unchained: {_per_event(plain)}")
    entries = synthetic_log(replay)
    folded = Replay()
    folded.feed(entries)
    runs: dict[str, list[tuple[float, float]]] = {"verified": [], "bare": [], "form2": [], "read": []}
    with bench_database() as url, bench_database() as old:
        loop.run(load_log(url, entries, folded))
        loop.run(load_log(old, entries, folded, form=WRITER_JSON))  # the log the writer before made
        del entries
        for _ in range(rounds):
            variants = (("verified", url, True), ("bare", url, False), ("form2", old, True), ("read", url, True))
            for name, where, chain in variants:
                cpu = _own_cpu()
                with _reading_only(name == "read"):
                    seconds, result = loop.run(replay_db(where, chain=chain))
                assert result.ok or name == "read", [p.to_dict() for p in result.chain[:3]]
                runs[name].append((seconds, _own_cpu() - cpu))
    verified, bare, before, read = runs["verified"], runs["bare"], runs["form2"], runs["read"]
    cost = statistics.median(a[0] / b[0] for a, b in zip(verified, bare, strict=True))
    old_cost = statistics.median(a[0] / b[0] for a, b in zip(before, bare, strict=True))
    print(
        f"hash chain, audit replay of {replay:,} events: "
        + ", ".join(f"{a[0]:.2f}/{b[0]:.2f}" for a, b in zip(verified, bare, strict=True))
        + f" s verified/not in {rounds} alternating rounds; median ratio {cost:.2f}x (goal <= 1.10x)"
    )
    print(
        "  the same log as the writer before made it (digest form 2), verified: "
        + ", ".join(f"{a[0]:.2f}" for a in before)
        + f" s; median ratio {old_cost:.2f}x"
    )
    floor = statistics.median(a[0] / b[0] for a, b in zip(read, bare, strict=True))
    print(
        "  the chain's columns read and not checked (the floor of any check in this process): "
        + ", ".join(f"{a[0]:.2f}" for a in read)
        + f" s; median ratio {floor:.2f}x"
    )
    cpu = {name: statistics.median(c for _, c in rows) / replay * 1e6 for name, rows in runs.items()}
    print(
        f"  client CPU (both processes): verified {cpu['verified']:.2f}, not {cpu['bare']:.2f},"
        f" form 2 verified {cpu['form2']:.2f}, read only {cpu['read']:.2f} µs/event; {os.cpu_count()} cores"
    )
    figures = {
        "appends": appended,
        "audit_verified": verified,
        "audit_bare": bare,
        "audit_form2": before,
        "audit_read_only": read,
    }
    ratios = {"append_ratio": ratio, "audit_ratio": cost, "form2_audit_ratio": old_cost, "read_only_ratio": floor}
    print(json.dumps({"chain": figures, **ratios}))
    return figures


@contextmanager
def _reading_only(on: bool) -> Iterator[None]:
    """The audit reading the chain's columns as a verifying one does, and checking nothing: what
    no check done in these processes can go below. The audit's workers are forked, so they run
    this too."""
    if not on:
        yield
        return
    check = LogChain.feed

    def skim(self: LogChain, rows: Iterable[Sequence[object]]) -> None:
        for _ in rows:
            pass

    LogChain.feed = skim  # type: ignore[method-assign]
    try:
        yield
    finally:
        LogChain.feed = check  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60000, help="events per micro-batched round")
    parser.add_argument("--replay", type=int, default=1_000_000, help="events in the replayed log")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.events, args.replay, args.rounds = 800, 2000, 1
    chain_figures(args.events, args.replay, args.rounds)


if __name__ == "__main__":
    main()
