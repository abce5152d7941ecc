"""What the log's hash chain costs (issue 21), old against new, alternately in one run: the
micro-batched append with and without it (`sql.write_statement`), and the audit replay with and
without verifying it. `python -m benchmarks.chain [--events N] [--replay N]`; the rest of the
store's figures are `benchmarks.store`'s, whose workload and log this reuses."""

from __future__ import annotations

import argparse
import json
import statistics

from benchmarks._batcher import AppendBatcher
from benchmarks._db import bench_database
from benchmarks.store import FLUSHERS, WRITERS, apply_pools, drive, load_log, replay_db, synthetic_log
from shared.policy.audit import Replay
from shared.runtime import loop
from shared.store import sql
from shared.store.eventstore import EventStore


async def chain_cost_appends(url: str, total: int, rounds: int = 3) -> tuple[list[float], list[float]]:
    """Micro-batched appends with the chained write and with the write before it, alternately
    in one process and one database: (events/s chained, events/s unchained) per round."""
    store = EventStore.connect(url, pool_size=8)
    await apply_pools(store)
    batcher = AppendBatcher(store, max_batch=400, flushers=FLUSHERS)
    chained, plain = sql.write_statement(True), sql.write_statement(False)
    out: tuple[list[float], list[float]] = ([], [])
    try:
        await drive(batcher.append, 4000, WRITERS)  # warm up
        for _ in range(rounds):
            for statement, figures in ((chained, out[0]), (plain, out[1])):
                sql.WRITE = statement
                seconds, _ = await drive(batcher.append, total, WRITERS)
                figures.append(total / seconds)
    finally:
        sql.WRITE = chained
        await batcher.close()
        await store.close()
    return out


def chain_figures(events: int, replay: int, rounds: int = 3) -> dict[str, list[float]]:
    """What the hash chain costs, old against new, alternately in the same run: micro-batched
    appends (the write with and without it) and the audit replay (with and without verifying)."""
    with bench_database() as url:
        chained, plain = loop.run(chain_cost_appends(url, events, rounds))
    ratio = statistics.median(chained) / statistics.median(plain)
    print(
        "hash chain, micro-batched appends: "
        + ", ".join(f"{a:,.0f}/{b:,.0f}" for a, b in zip(chained, plain, strict=True))
        + f" events/s chained/unchained in {rounds} alternating rounds; median ratio {ratio:.2f}x (goal >= 0.90x)"
    )
    entries = synthetic_log(replay)
    folded = Replay()
    folded.feed(entries)
    with bench_database() as url:
        loop.run(load_log(url, entries, folded))
        del entries
        verified: list[float] = []
        bare: list[float] = []
        for _ in range(rounds):
            seconds, result = loop.run(replay_db(url, chain=True))
            assert result.ok, [p.to_dict() for p in result.chain[:3]]
            verified.append(seconds)
            bare.append(loop.run(replay_db(url, chain=False))[0])
    cost = statistics.median(verified) / statistics.median(bare)
    print(
        f"hash chain, audit replay of {replay:,} events: "
        + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(verified, bare, strict=True))
        + f" s verified/not in {rounds} alternating rounds; median ratio {cost:.2f}x (goal <= 1.10x)"
    )
    figures = {"appends_chained": chained, "appends_unchained": plain, "audit_verified": verified, "audit_bare": bare}
    print(json.dumps({"chain": figures, "append_ratio": ratio, "audit_ratio": cost}))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60000, help="events per micro-batched round")
    parser.add_argument("--replay", type=int, default=1_000_000, help="events in the replayed log")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each")
    args = parser.parse_args()
    chain_figures(args.events, args.replay, args.rounds)


if __name__ == "__main__":
    main()
