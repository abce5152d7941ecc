"""Faults with real processes: every bus message delivered three times (a test switch that
redelivers through JetStream) ends where one delivery does."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from shared.bus.names import BusNames
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url, stop_command

pytestmark = pytest.mark.timeout(240)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
LOWERED = ROOT / "examples/scenarios/lowered-node-limit.yaml"
"""12 nodes, then limits.nodes lowered to 5: an end state that does not depend on timing."""
END_STATE = (
    "nodeclaims_created",
    "nodeclaims_terminated",
    "max_nodes",
    "final_nodes",
    "disruptions",
    "pending_pods_at_end",
    "evictions",
    "audit_ok",
    "over_limit",
)


async def deliveries(url: str, names: BusNames) -> int:
    """Messages the stream's consumers were handed, redeliveries included."""
    nc = await nats.connect(url)
    try:
        return sum(c.delivered.consumer_seq for c in await nc.jetstream().consumers_info(names.stream))
    finally:
        await nc.close()


def test_every_message_delivered_three_times_ends_as_one_delivery_does(tmp_path, temporary_database, nats_server_url):
    async def both() -> None:
        async with temporary_database() as once_url, temporary_database() as thrice_url:
            runs = {}
            for label, url, times in (("once", once_url, "1"), ("thrice", thrice_url, "3")):
                names = BusNames(f"{label}{os.getpid()}")
                env = cli_environment(tmp_path / label, url, nats_server_url, names.deployment)
                env["NODEWRIGHT_TEST_DELIVERIES"] = times
                (tmp_path / label).mkdir()
                runs[label] = (
                    names,
                    url,
                    subprocess.Popen(
                        [NODEWRIGHT, "run", str(LOWERED), "--speed", "120", "--output", "json"],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=env,
                        cwd=tmp_path / label,
                        text=True,
                    ),
                )
            summaries, handed = {}, {}
            try:
                for label, (names, url, run) in runs.items():
                    out, err = await asyncio.to_thread(run.communicate, timeout=200)
                    assert run.returncode == 0, out[-3000:] + err[-3000:]
                    summaries[label] = json.loads(out)
                    handed[label] = await deliveries(nats_server_url, names)
                    await drop_run_log(run_log_url(url, summaries[label]["run"]))
            finally:
                for _, _, run in runs.values():
                    stop_command(run)
            for key in END_STATE:
                assert summaries["thrice"][key] == summaries["once"][key], key
            assert summaries["once"]["audit_ok"] is True and summaries["once"]["final_nodes"] == {"capped": 5}
            assert handed["thrice"] >= 2.5 * handed["once"], handed  # the switch did redeliver
            log = (tmp_path / "thrice" / "data" / "logs" / "scheduler.log").read_text()
            assert "every message is handled 3 times" in log

    asyncio.run(both())
