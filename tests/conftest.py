from __future__ import annotations

import copy
import gc
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "nodepools"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs three workers on two cores (pytest-xdist, `--dist loadgroup`): most tests
    wait on simulated time rather than compute. The end-to-end tests that run a whole system of
    processes go in two streams (`STREAMS`, balanced by their durations), each one test after
    another on one worker, so at most two systems share the cores; the unit and integration tests
    and the end-to-end tests of single commands and single processes (`ALONE`, which start no
    system) fill the workers around them. A file that names its own group keeps it."""
    e2e = ROOT / "tests" / "e2e"
    for item in items:
        path = Path(str(item.path))
        if e2e in path.parents and path.name not in ALONE and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("e2e-a" if path.name in STREAMS else "e2e-b"))


STREAMS = frozenset(
    {
        "test_run.py",
        "test_run_aws.py",
        "test_up.py",
        "test_faults.py",
        "test_bus_processes.py",
        "test_logs.py",
        "test_watch_expired.py",
    }
)
"""The system tests of the first stream (about half of the system tests' time); the rest, and any
new file, go in the second."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """No garbage collection while a failure's report is made. Python 3.11.7 fails a worker with
    `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905) when a
    collection inside the report's `ast.parse` finalizes a pending asyncio task whose logged
    warning parses source again: the run stops there and hides every later result."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if enabled:
            gc.enable()


ALONE = frozenset(
    {
        "test_cli_bad_input.py",
        "test_cli_budgets.py",
        "test_cli_validate.py",
        "test_cli_servers.py",
        "test_listen_addresses.py",
        "test_stop_during_outage.py",
        "test_supervisor.py",
    }
)
"""End-to-end test files whose processes are commands or single services, never a system."""


BASE_NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "team-a"},
    "spec": {
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            },
        },
        "disruption": {"budgets": [{"nodes": "10%"}]},
        "limits": {"cpu": "1000", "memory": "1000Gi"},
    },
}


def nodepool_doc(**overrides: Any) -> dict[str, Any]:
    """A valid NodePool document with dotted-path overrides, e.g. `**{"spec.weight": 5}`."""
    doc = copy.deepcopy(BASE_NODEPOOL)
    for path, value in overrides.items():
        set_path(doc, path, value)
    return doc


def set_path(doc: Any, path: str, value: Any) -> None:
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


@pytest.fixture
def base_doc() -> dict[str, Any]:
    return nodepool_doc()
