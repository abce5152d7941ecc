"""`nodewright validate` as a user runs it: a process, its output and its exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import EXAMPLES, ROOT, nodepool_doc


def nodewright(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("nodewright", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "cli.main"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_examples_are_all_valid():
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    run = nodewright("validate", *files)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) >= 14
    assert all(line.startswith("VALID ") for line in lines)
    assert "VALID backend1a (" in run.stdout


def test_invalid_pool_exits_1_with_paths(tmp_path):
    bad = nodepool_doc(
        **{
            "metadata.name": "bad",
            "spec.disruption.budgets": [{"nodes": "1"}, {"nodes": "0", "schedule": "@daily"}],
        }
    )
    good = nodepool_doc(**{"metadata.name": "good"})
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump_all([good, bad]))
    run = nodewright("validate", str(path))
    assert run.returncode == 1
    assert f"VALID good ({path})" in run.stdout
    assert f"INVALID bad ({path})" in run.stdout
    assert "  spec.disruption.budgets[1]: 'schedule' must be set with 'duration'" in run.stdout


def test_json_output(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(nodepool_doc(**{"spec.weight": 0})))
    run = nodewright("validate", "--output", "json", str(path))
    assert run.returncode == 1
    (row,) = json.loads(run.stdout)
    assert row["file"] == str(path) and row["name"] == "team-a" and row["valid"] is False
    assert row["errors"][0]["path"] == "spec.weight"


def test_unreadable_not_yaml_or_other_kind_exit_2(tmp_path):
    not_yaml = tmp_path / "x.yaml"
    not_yaml.write_text("a: [unclosed")
    other = tmp_path / "pod.yaml"
    other.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("\n# nothing here\n")
    for path in (not_yaml, other, tmp_path / "missing.yaml", empty):
        run = nodewright("validate", str(path))
        assert run.returncode == 2, (path, run.stdout, run.stderr)
        assert f"ERROR {path}" in run.stderr
    mixed = nodewright("validate", str(EXAMPLES / "gpu.yaml"), str(other))
    assert mixed.returncode == 2
    assert "VALID gpu" in mixed.stdout
