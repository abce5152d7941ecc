"""With NODEWRIGHT_SIGNING_KEY, every service `nodewright run` starts signs what it appends, the
audit given the key verifies every event, a wrong key fails it, and the key never reaches a log
(issue 38, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from shared.bus.names import BusNames
from shared.policy.digests import Signer
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
KEY = "9f2c4e1a7b3d5f608192a3b4c5d6e7f8-signing-key-for-the-test"
DEPLOYMENT = "blue"


def nodewright(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NODEWRIGHT, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=240)


async def test_a_run_with_the_key_signs_every_event_and_its_audit_verifies_them(
    tmp_path: Path, temporary_database, nats_server_url: str
):
    scenario = ROOT / "examples/scenarios/burst-node-limit.yaml"
    key, wrong = tmp_path / "key", tmp_path / "wrong"
    key.write_text(KEY + "\n")
    wrong.write_text("another key, as long as a key must be\n")
    async with temporary_database() as url:
        plain = cli_environment(tmp_path, url, nats_server_url, DEPLOYMENT)
        signing = plain | {"NODEWRIGHT_SIGNING_KEY": KEY}
        played = nodewright(signing, tmp_path, "run", str(scenario), "--speed", "240", "--output", "json")
        assert played.returncode == 0, played.stdout + played.stderr
        summary = json.loads(played.stdout)
        try:
            audited = nodewright(
                plain, tmp_path, "audit", "--run", summary["run"], "--key-file", str(key), "-o", "json"
            )
            assert audited.returncode == 0, audited.stdout + audited.stderr
            chain = json.loads(audited.stdout)["chain"]
            assert chain["problems"] == []
            assert chain["signatures"] == {
                "checked": True,
                "key_id": Signer(KEY.encode()).key_id.hex(),
                "signed": summary["events"],
                "before_signing": 0,
            }
            by_env = nodewright(signing, tmp_path, "audit", "--run", summary["run"])
            assert by_env.returncode == 0 and f"signatures: {summary['events']} event(s) verified" in by_env.stdout
            refused = nodewright(plain, tmp_path, "audit", "--run", summary["run"], "--key-file", str(wrong))
            assert refused.returncode == 1
            assert (
                f"{summary['events']} event(s) signed with key id {Signer(KEY.encode()).key_id.hex()}" in refused.stdout
            )
            unchecked = nodewright(plain, tmp_path, "audit", "--run", summary["run"])
            assert unchecked.returncode == 0 and "signatures: not checked" in unchecked.stdout
        finally:
            await drop_run_log(run_log_url(url, summary["run"]))
            nc = await nats.connect(nats_server_url)
            try:
                await nc.jetstream().delete_stream(BusNames(DEPLOYMENT).stream)
            finally:
                await nc.close()
    written = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and p.suffix in (".log", ".json", ".jsonl")]
    assert written, "the services wrote their logs under the data directory"
    for path in written:
        assert KEY not in path.read_text(errors="replace"), path
