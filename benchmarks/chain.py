"""What the log's hash chain costs (issue 21), old against new, alternately in one run: the
micro-batched append with and without it (`write_batch(chained=False)`: the write before the
chain, hashing nothing), and with the signing key (issue 38); the audit replay with and without
verifying it; beside them, the audit of the same log as the writer before the current digest
form made it (form 2), the audit of the signed log with and without the key, and what the heads
of every stream cost the audit (one mark). `python -m benchmarks.chain [--events N] [--replay
N] [--rounds N]`; the rest of the store's figures are `benchmarks.store`'s, whose workload and
log this reuses.

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
import time
import timeit
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import asyncpg

from benchmarks._batcher import AppendBatcher
from benchmarks._db import bench_database
from benchmarks.store import FLUSHERS, WRITERS, apply_pools, drive, load_log, replay_db, synthetic_log
from cli.audit import AuditResult, audit_database
from shared.config import driver_params
from shared.policy.audit import LogEntry, Replay
from shared.policy.chain import LogChain
from shared.policy.counters import COUNTED_EVENTS
from shared.policy.digests import WRITER_JSON, Signer
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


KEY = b"a benchmark's signing key, 32 bytes or more"


async def chain_cost_appends(url: str, total: int, rounds: int = 3) -> dict[str, list[Round]]:
    """Micro-batched appends with the chained write, with the write before it, and with the
    chained write signing each event, alternately in one process and one database: per round
    (events/s, client µs/event, backends' µs/event)."""
    store = EventStore.connect(url, pool_size=8)
    await apply_pools(store)
    batcher = AppendBatcher(store, max_batch=400, flushers=FLUSHERS)
    probe = await asyncpg.connect(**driver_params(url))
    chained = writes.write_batch
    variants = {
        "chained": (chained, None),
        "unchained": (functools.partial(chained, chained=False), None),
        "signed": (chained, Signer(KEY)),
    }
    out: dict[str, list[Round]] = {name: [] for name in variants}
    try:
        await drive(batcher.append, 4000, WRITERS)  # warm up: connections, prepared statements
        for round_ in range(rounds):
            for name, (write, signer) in _rotated(list(variants.items()), round_):
                writes.write_batch = write  # type: ignore[assignment]
                store.signer = signer
                client, backends = _own_cpu(), await _backends_cpu(probe)
                seconds, _ = await drive(batcher.append, total, WRITERS)
                client, after = _own_cpu() - client, await _backends_cpu(probe)
                server = (after - backends) / total * 1e6 if after is not None and backends is not None else None
                out[name].append((total / seconds, client / total * 1e6, server))
    finally:
        writes.write_batch = chained
        store.signer = None
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
    signed = appended["signed"]
    signing = statistics.median(a[0] / b[0] for a, b in zip(signed, chained, strict=True))
    print(
        "signing, micro-batched appends: "
        + ", ".join(f"{a[0]:,.0f}/{b[0]:,.0f}" for a, b in zip(signed, chained, strict=True))
        + f" events/s signed/not in {rounds} alternating rounds; median ratio {signing:.2f}x"
    )
    print(f"  signed: {_per_event(signed)}")
    signing_us = _sign_micros()
    chained_client = statistics.median(r[1] for r in chained)
    print(
        f"  signing one event (HMAC-SHA256 of its hash, as hex), timed alone: {signing_us:.2f} µs,"
        f" {signing_us / chained_client:.1%} of a chained append's client CPU in this run"
    )
    entries = synthetic_log(replay)
    streams = len({e.stream_id for e in entries})
    marking = _mark_seconds(entries, rounds)
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
    verified_s = statistics.median(a[0] for a in verified)
    print(
        f"  the heads of every stream as of one mark ({streams:,} streams, in the audit's processes):"
        f" {marking:.3f} s, {marking / streams * 1e6:.2f} µs/stream, {marking / verified_s:.1%} of the verified audit"
    )
    keyed = _signed_audits(replay, rounds)
    keyed_cpu = {name: statistics.median(c for _, c in rows) / replay * 1e6 for name, rows in keyed.items()}
    key_cost = statistics.median(a[0] / b[0] for a, b in zip(keyed["key"], keyed["no key"], strict=True))
    print(
        f"signing, audit replay of {replay:,} signed events: "
        + ", ".join(f"{a[0]:.2f}/{b[0]:.2f}" for a, b in zip(keyed["key"], keyed["no key"], strict=True))
        + f" s verified with/without the key in {rounds} alternating rounds; median ratio {key_cost:.2f}x"
    )
    print(
        f"  client CPU (both processes): with the key {keyed_cpu['key']:.2f}, without {keyed_cpu['no key']:.2f}"
        f" µs/event; verifying one signature timed alone: {signing_us:.2f} µs"
    )
    figures = {
        "appends": appended,
        "audit_verified": verified,
        "audit_bare": bare,
        "audit_form2": before,
        "audit_read_only": read,
    }
    figures["audit_signed_key"], figures["audit_signed_no_key"] = keyed["key"], keyed["no key"]
    ratios = {
        "append_ratio": ratio,
        "audit_ratio": cost,
        "form2_audit_ratio": old_cost,
        "read_only_ratio": floor,
        "signed_append_ratio": signing,
        "signed_audit_ratio": key_cost,
        "mark_share": marking / verified_s,
    }
    print(json.dumps({"chain": figures, **ratios}))
    return figures


def _rotated(variants: list, round_: int) -> list:
    """The variants in another order each round: whichever runs first (or after another) gains
    or loses nothing on average."""
    shift = round_ % len(variants)
    return variants[shift:] + variants[:shift]


def _sign_micros(repeat: int = 5, number: int = 100_000) -> float:
    """What `Signer.sign` and its hex cost per event, the least of `repeat` timings."""
    signer, value = Signer(KEY), os.urandom(32)
    return min(timeit.repeat(lambda: signer.sign(value).hex(), repeat=repeat, number=number)) / number * 1e6


def _mark_seconds(entries: list[LogEntry], rounds: int) -> float:
    """What one mark costs (`LogChain._mark`: a term per stream), the least of `rounds`: the
    streams of the log with a head each (a hash of the real length: the cost is per stream)."""
    chain = LogChain(COUNTED_EVENTS, 0)
    for e in entries:
        chain._tails[e.stream_id] = (chain._tails.get(e.stream_id, (0, b""))[0] + 1, os.urandom(32))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        chain._mark(len(entries))
        best = min(best, time.perf_counter() - start)
    return best


def _signed_audits(replay: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """The audit of the same synthetic log, every event signed as the writer with the key signs
    it, with and without the key, alternately on the same database."""
    signer = Signer(KEY)
    runs: dict[str, list[tuple[float, float]]] = {"key": [], "no key": []}
    entries = synthetic_log(replay)
    folded = Replay()
    folded.feed(entries)
    with bench_database() as url:
        loop.run(load_log(url, entries, folded))
        del entries
        loop.run(_sign_log(url, signer))
        for round_ in range(rounds):
            for name, key in _rotated([("key", signer), ("no key", None)], round_):
                cpu = _own_cpu()
                seconds, result = loop.run(_audit(url, key))
                assert result.ok, [p.to_dict() for p in result.chain[:3]]
                runs[name].append((seconds, _own_cpu() - cpu))
    return runs


async def _sign_log(url: str, signer: Signer) -> None:
    """Every event's signature, as the writer with the key would have stored it (setup only)."""
    conn = await asyncpg.connect(**driver_params(url))
    try:
        rows = await conn.fetch("SELECT position, hash FROM events")
        async with conn.transaction():
            await conn.execute("SET LOCAL nodewright.maintenance = on")
            await conn.execute("CREATE TEMP TABLE signed (position bigint, signature bytea) ON COMMIT DROP")
            await conn.copy_records_to_table("signed", records=[(p, signer.sign(h)) for p, h in rows])
            await conn.execute(
                "UPDATE events AS e SET signature = s.signature FROM signed AS s WHERE e.position = s.position"
            )
        await conn.execute("VACUUM ANALYZE events")
    finally:
        await conn.close()


async def _audit(url: str, signer: Signer | None) -> tuple[float, AuditResult]:
    start = time.perf_counter()
    result = await audit_database(url, signer=signer)
    return time.perf_counter() - start, result


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
