"""Every benchmark runs: each script under benchmarks/ in its `--smoke` mode (tiny sizes, the same
code path, its figures printed), as a process of its own, on the session's PostgreSQL and NATS
(it makes databases and streams of its own there). A benchmark that no longer runs fails here,
not at the next `make bench`. No figure is checked: a smoke run measures nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

pytestmark = pytest.mark.timeout(600)


COVERED = {
    "e2e": "tests/e2e/test_e2e_benchmark.py runs its burst (run_once) and its table (render)",
    "whatif": "test_the_whatif_benchmark_records_and_replays below runs its --smoke and checks its figures",
}
"""Benchmarks another test runs already: not run twice."""


def benchmarks() -> list[str]:
    """The runnable scripts: the modules of benchmarks/ with a main block (helpers have none)."""
    return sorted(
        path.stem
        for path in BENCHMARKS.glob("*.py")
        if not path.name.startswith("_") and 'if __name__ == "__main__":' in path.read_text()
    )


def test_make_bench_runs_every_benchmark_and_only_those():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert sorted(re.findall(r"benchmarks[./](\w+)", recipe)) == benchmarks()


def test_every_benchmark_runs_in_its_smoke_mode(database_server_url: str, nats_server_url: str, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {"NODEWRIGHT_DATABASE_URL": database_server_url, "NODEWRIGHT_NATS_URL": nats_server_url}
    failed, took = [], {}
    for name in sorted(set(benchmarks()) - set(COVERED)):
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", f"benchmarks.{name}", "--smoke"],
            cwd=tmp_path,
            env=env | {"PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=240,
        )
        took[name] = round(time.monotonic() - started, 1)
        if run.returncode != 0 or not run.stdout.strip():
            failed.append((name, run.returncode, (run.stdout + run.stderr)[-3000:]))
    print(took)  # where the suite's time goes, with -s
    assert failed == [], "\n\n".join(f"{name} exited {code}:\n{tail}" for name, code, tail in failed)


def test_the_whatif_benchmark_records_and_replays(tmp_path: Path):
    """Offline (no server): the first morning of the flagship recorded by the runner and replayed
    in both variants; the figures are all there and the baseline is faithful to its record. Bad
    options exit 2 with the option named."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "benchmarks.whatif", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)

    run = bench("--smoke")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures["recording_this_run"] and figures["events"] > 0
    assert set(figures["variants"]) == {"baseline", "changed"}
    assert all(v["seconds"] > 0 for v in figures["variants"].values())
    assert figures["faithful"], run.stdout
    log = run.stdout.split("\n", 1)[0].removeprefix("log: ").split(" (", 1)[0]
    assert not Path(log).exists(), f"a smoke run keeps its recording in a temporary directory, not {log}"
    for args, named in ((["--days", "0"], "--days"), (["--log", "missing.jsonl"], "--log")):
        bad = bench(*args)
        assert bad.returncode == 2 and named in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
