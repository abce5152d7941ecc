"""Bad input gets a clear error, never a traceback (issue 23, item 6): every kind of bad file or
argument a new user tries, through every command that reads one, exits 2 with a message that
names the field, rule or setting. One table, run in-process (fast, every row) and, for a row
of each kind, as the real `nodewright` process a user starts (in parallel: each costs a second
of imports). A crash exits 3 with one line and a log file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import failures
from cli import validate as validate_cmd
from cli.main import app, main
from tests.conftest import EXAMPLES, ROOT, nodepool_doc
from tests.factories import scenario_doc

EXTENSIONS = str(EXAMPLES / "extensions.yaml")  # 1,324 bytes
NOW = ("--at", "2026-11-23T16:00:00Z", "--nodes", "3")


def _flow(depth: int) -> str:
    return "a: " + "[" * depth + "]" * depth + "\n"


def _laughs() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
    return text


def _scenario(**spec: object) -> str:
    doc = scenario_doc(nodePools=[nodepool_doc(**{"metadata.name": "a"})], **spec)
    return yaml.safe_dump(doc)


def _event_line() -> str:
    return (
        '{"position": 1, "event_id": "00000000-0000-0000-0000-000000000001", "stream_id": "nodepool-a",'
        ' "version": 1, "type": "NodePoolApplied", "data": {"nested": ' + "[" * 200 + "]" * 200 + "},"
        ' "occurred_at": "2026-11-23T09:00:00+00:00", "recorded_at": "2026-11-23T09:00:00+00:00"}\n'
    )


FILES: dict[str, str | bytes] = {
    "binary.yaml": bytes(range(256)) * 4,
    "deep.yaml": _flow(1000),
    "deep.json": '{"a": ' + "[" * 1000 + "]" * 1000 + "}",
    "laughs.yaml": _laughs(),
    "empty.yaml": "",
    "docless.yaml": "# only comments\n---\n---\n",
    "negative.yaml": _scenario(duration="-30m"),
    "replicas.yaml": _scenario(workloads=[{"name": "web", "replicas": 10**9}]),
    "types.yaml": _scenario(cloud={"instanceTypes": 10**9}),
    "start.yaml": _scenario(start="0001-01-01T00:00:00Z"),
    "deep-scenario.yaml": _scenario(workloads=[{"name": "web", "labels": {"x": "y"}}]).replace(
        "x: y", "x: " + "[" * 100 + "]" * 100
    ),
    "deep-line.jsonl": _event_line(),
    "event.jsonl": _event_line().replace("[" * 200 + "]" * 200, "[]"),
    "bad-trailer.jsonl": _event_line().replace("[" * 200 + "]" * 200, "[]") + '{"trailer": {"events": -1}}\n',
    "anchor-no-position.json": '{"digest": "00", "pools": {}}',
    "anchor-edited.json": '{"position": 3, "digest": "00", "pools": {}, "streams": {}}',
    "anchor-bad-streams.json": '{"position": 3, "digest": "00", "pools": {}, "streams": {"pod": {"streams": 1}}}',
    "short.key": "short\n",
    "huge.key": "k" * 5000,
}


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    says: tuple[str, ...]
    """Fragments stderr must hold: the field, rule or setting."""
    env: dict[str, str] = field(default_factory=dict)
    process: bool = False
    """Also run as the real `nodewright` process."""


CASES = [
    # a file past the size limit (a small limit, so the test is fast)
    Case(
        "validate-oversized",
        ("validate", EXTENSIONS),
        ("larger than the limit of 1.0KiB", "NODEWRIGHT_MAX_INPUT_BYTES"),
        {"NODEWRIGHT_MAX_INPUT_BYTES": "1KiB"},
        process=True,
    ),
    Case(
        "budgets-oversized",
        ("budgets", EXTENSIONS, *NOW),
        ("larger than the limit", "NODEWRIGHT_MAX_INPUT_BYTES"),
        {"NODEWRIGHT_MAX_INPUT_BYTES": "1000"},
    ),
    Case(
        "run-oversized",
        ("run", "{negative.yaml}"),
        ("larger than the limit", "NODEWRIGHT_MAX_INPUT_BYTES"),
        {"NODEWRIGHT_MAX_INPUT_BYTES": "100"},
    ),
    Case(
        "bad-setting",
        ("validate", EXTENSIONS),
        ("a bad setting: NODEWRIGHT_MAX_INPUT_BYTES",),
        {"NODEWRIGHT_MAX_INPUT_BYTES": "lots"},
    ),
    # binary files
    Case("validate-binary", ("validate", "{binary.yaml}"), ("not UTF-8 text (a binary file?)",)),
    Case("budgets-binary", ("budgets", "{binary.yaml}", *NOW), ("not UTF-8 text",), process=True),
    Case("describe-binary", ("describe", "{binary.yaml}"), ("not UTF-8 text",)),
    Case("report-binary", ("report", "{out}", "--from-file", "{binary.yaml}"), ("binary.yaml:1", "a binary file?")),
    # 1,000-deep nesting
    Case("validate-deep-yaml", ("validate", "{deep.yaml}"), ("nested deeper than 64", "NODEWRIGHT_MAX_NESTING")),
    Case(
        "validate-deep-json",
        ("validate", "{deep.json}"),
        ("nested deeper than 64", "NODEWRIGHT_MAX_NESTING"),
    ),
    Case("budgets-deep", ("budgets", "{deep.yaml}", *NOW), ("NODEWRIGHT_MAX_NESTING",)),
    Case("describe-deep", ("describe", "{deep.json}"), ("NODEWRIGHT_MAX_NESTING",)),
    Case("run-deep", ("run", "{deep.yaml}"), ("NODEWRIGHT_MAX_NESTING",)),
    Case("up-deep", ("up", "--scenario", "{deep-scenario.yaml}", "--for", "1"), ("nested deeper than 64",)),
    Case(
        "audit-deep-line",
        ("audit", "--from-file", "{deep-line.jsonl}"),
        ("deep-line.jsonl:1", "NODEWRIGHT_MAX_NESTING"),
        process=True,
    ),
    Case("audit-deep-anchor", ("audit", "--from-file", "{deep-line.jsonl}", "--anchor", "{deep.json}"), ("deep.json",)),
    # a YAML bomb
    Case("validate-laughs", ("validate", "{laughs.yaml}"), ("billion laughs",), process=True),
    Case("run-laughs", ("run", "{laughs.yaml}"), ("billion laughs",)),
    # empty and document-less
    Case("validate-empty", ("validate", "{empty.yaml}"), ("holds no NodePool document",)),
    Case("validate-docless", ("validate", "{docless.yaml}"), ("holds no NodePool document",)),
    Case("budgets-empty", ("budgets", "{empty.yaml}", *NOW), ("holds no NodePool document",)),
    Case("describe-docless", ("describe", "{docless.yaml}"), ("holds no NodePool document",)),
    Case("run-docless", ("run", "{docless.yaml}"), ("holds no document",)),
    # instants out of range, and a calendar too long
    Case(
        "budgets-year-1",
        ("budgets", EXTENSIONS, "--at", "0001-01-01T00:00:00Z", "--nodes", "3"),
        ("--at", "out of range"),
    ),
    Case(
        "budgets-year-2-to-9999",
        ("budgets", EXTENSIONS, "--from", "0002-01-01T00:00:00Z", "--to", "9999-01-01T00:00:00Z", "--nodes", "3"),
        ("--from", "out of range"),
        process=True,
    ),
    Case(
        "budgets-six-years",
        ("budgets", EXTENSIONS, "--from", "2026-01-01T00:00:00Z", "--to", "2032-01-01T00:00:00Z", "--nodes", "3"),
        ("at most 1827 days", "NODEWRIGHT_MAX_CALENDAR_DAYS"),
    ),
    Case("run-start-year-1", ("run", "{start.yaml}"), ("spec.start", "out of range")),
    # absurd scenarios: refused before anything starts
    Case("run-negative-duration", ("run", "{negative.yaml}"), ("spec.duration", "must be positive")),
    Case(
        "run-billion-replicas",
        ("run", "{replicas.yaml}"),
        ("spec.workloads[0].replicas", "at most 100,000"),
        process=True,
    ),
    Case("run-instance-types", ("run", "{types.yaml}"), ("spec.cloud.instanceTypes", "5000")),
    Case("up-negative-duration", ("up", "--scenario", "{negative.yaml}", "--for", "1"), ("spec.duration",)),
    # output paths: checked before any work (issue 38, item 5)
    Case(
        "run-report-a-file",
        ("run", str(ROOT / "examples/scenarios/burst-node-limit.yaml"), "--report", "{binary.yaml}"),
        ("--report: ", "binary.yaml exists and is not a directory"),
        process=True,
    ),
    Case(
        "run-report-under-a-file",
        ("run", str(ROOT / "examples/scenarios/burst-node-limit.yaml"), "--report", f"{EXTENSIONS}/report"),
        ("--report: ", "extensions.yaml is not a directory, so"),
    ),
    Case(
        "report-directory-a-file",
        ("report", "{binary.yaml}", "--from-file", "{deep-line.jsonl}"),
        ("DIRECTORY: ", "binary.yaml exists and is not a directory"),
    ),
    Case("export-to-a-directory", ("events", "export", str(ROOT)), ("FILE: ", "is a directory")),
    Case(
        "export-into-no-directory",
        ("events", "export", str(ROOT / "no-such-directory" / "log.jsonl")),
        ("FILE: ", "no-such-directory does not exist"),
    ),
    Case(
        "audit-save-anchor-under-a-file",
        ("audit", "--from-file", "{deep-line.jsonl}", "--save-anchor", f"{EXTENSIONS}/anchor.json"),
        ("--save-anchor: ", "extensions.yaml is not a directory"),
    ),
    # a URL whose password should have been escaped: refused, the password never shown
    Case(
        "database-url-unescaped-at",
        ("runs",),
        ("NODEWRIGHT_DATABASE_URL: its user name or password (not shown)", "percent-encode", "%40"),
        {"NODEWRIGHT_DATABASE_URL": "postgresql://nodewright:Hunt@er2x@127.0.0.1:1/nodewright"},
        process=True,
    ),
    Case(
        "nats-url-unescaped-hash",
        ("events", "dead"),
        ("NODEWRIGHT_NATS_URL: its user name or password (not shown)", "%23"),
        {"NODEWRIGHT_NATS_URL": "nats://cli:Hunt#er2x@127.0.0.1:1"},
    ),
    Case(
        "run-database-url-unescaped-space",
        ("run", str(ROOT / "examples/scenarios/burst-node-limit.yaml")),
        ("NODEWRIGHT_DATABASE_URL: its user name or password (not shown)", "%20"),
        {"NODEWRIGHT_DATABASE_URL": "postgresql://nodewright:Hunt er2x@127.0.0.1:1/nodewright"},
    ),
    # servers where nothing listens (port 1): every command gives up, naming the server and the setting
    Case(
        "events-dead-no-nats",
        ("events", "dead"),
        ("cannot reach NATS at nats://127.0.0.1:1 (NODEWRIGHT_NATS_URL)",),
        {"NODEWRIGHT_NATS_URL": "nats://127.0.0.1:1"},
        process=True,
    ),
    *(
        Case(
            f"{'-'.join(a for a in args if a.isalpha())}-no-postgresql",
            args,
            ("cannot reach PostgreSQL at postgresql://127.0.0.1:1/nodewright (NODEWRIGHT_DATABASE_URL)",),
            {
                "NODEWRIGHT_DATABASE_URL": "postgresql://nodewright:Hunter2x@127.0.0.1:1/nodewright",
                "NODEWRIGHT_NATS_URL": "nats://127.0.0.1:1",
            },
        )
        for args in (
            ("events", "export", "{out}.jsonl"),
            ("audit",),
            ("replay", "--at", "now"),
            ("runs",),
            ("migrate",),
            ("delete", "nodeclaim", "x"),
            ("report", "{out}"),
            ("run", str(ROOT / "examples/scenarios/burst-node-limit.yaml")),
            ("up", "--scenario", str(ROOT / "examples/scenarios/burst-node-limit.yaml"), "--for", "1"),
        )
    ),
    Case(
        "relay-once-no-servers",
        ("relay", "--once"),
        ("cannot reach NATS at nats://127.0.0.1:1 (NODEWRIGHT_NATS_URL)",),
        {
            "NODEWRIGHT_DATABASE_URL": "postgresql://nodewright:Hunter2x@127.0.0.1:1/nodewright",
            "NODEWRIGHT_NATS_URL": "nats://127.0.0.1:1",
        },
    ),
]


# Bounded values (issue 38): what crash-looped a service while `run` said "audit OK", and what
# validation let through. A scenario holding one exits 2 before anything starts; `validate` on
# the NodePool alone exits 1 (`BOUND_INVALID` below).
_BOUND_POOLS = {
    "expire": {"spec.template.spec.expireAfter": "876000000h"},
    "limit": {"spec.limits": {"nodes": "1e1000000"}},
    "budget": {"spec.disruption.budgets": [{"nodes": "0", "schedule": "@daily", "duration": "99999999999999999h"}]},
    "labels": {"metadata.labels": {"example.com/team": "x" * 64}},
    "annotations": {"metadata.annotations": {"a": "x" * (256 * 1024)}},
    "zone": {
        "spec.disruption.budgets": [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": "localtime"}]
    },
    "factory": {
        "spec.disruption.budgets": [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": "Factory"}]
    },
}
for _kind, _overrides in _BOUND_POOLS.items():
    FILES[f"pool-{_kind}.yaml"] = yaml.safe_dump(nodepool_doc(**{"metadata.name": "a", **_overrides}))
    FILES[f"run-{_kind}.yaml"] = yaml.safe_dump(
        scenario_doc(nodePools=[nodepool_doc(**{"metadata.name": "a", **_overrides})])
    )
FILES["two-minutes.yaml"] = yaml.safe_dump(
    nodepool_doc(
        **{
            "metadata.name": "a",
            "spec.disruption.budgets": [{"nodes": "0", "schedule": "*/2 * * * *", "duration": "1m"}],
        }
    )
)
_POOL0 = "spec.nodePools[0]"
_DURATION = 'time: invalid duration "{}"'
_QUANTITY = 'Invalid value: "1e1000000": must be no more than 9223372036854775807m in size'
CASES += [
    Case(
        "run-expire-after-overflow",
        ("run", "{run-expire.yaml}"),
        (f"{_POOL0}.spec.template.spec.expireAfter", _DURATION.format("876000000h")),
        process=True,
    ),
    Case("run-limits-overflow", ("run", "{run-limit.yaml}"), (f"{_POOL0}.spec.limits[nodes]", _QUANTITY)),
    Case(
        "run-budget-duration-overflow",
        ("run", "{run-budget.yaml}"),
        (f"{_POOL0}.spec.disruption.budgets[0].duration", _DURATION.format("99999999999999999h")),
    ),
    Case("run-label-value", ("run", "{run-labels.yaml}"), (f"{_POOL0}.metadata.labels", "no more than 63 characters")),
    Case(
        "run-annotations-size",
        ("run", "{run-annotations.yaml}"),
        (f"{_POOL0}.metadata.annotations", "Too long: may not be more than 262144 bytes"),
    ),
    Case(
        "run-zone-localtime",
        ("run", "{run-zone.yaml}"),
        (f"{_POOL0}.spec.disruption.budgets[0].timeZone", 'unknown time zone "localtime"'),
    ),
    Case(
        "budgets-at-limits-overflow",
        ("budgets", "{pool-limit.yaml}", *NOW),
        ("spec.limits[nodes]", _QUANTITY),
        process=True,
    ),
    Case(
        "budgets-calendar-windows",
        (
            "budgets",
            "{two-minutes.yaml}",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-03-01T00:00:00Z",
            "--nodes",
            "3",
            "-o",
            "json",
        ),
        ("--from/--to", "too large to list", "NODEWRIGHT_MAX_CALENDAR_WINDOWS=25,000", "narrow --from/--to"),
        process=True,
    ),
    Case(
        "budgets-calendar-windows-setting",
        ("budgets", EXTENSIONS, "--from", "2026-11-23T00:00:00Z", "--to", "2026-12-23T00:00:00Z", "--nodes", "3"),
        ("NODEWRIGHT_MAX_CALENDAR_WINDOWS=10", "narrow --from/--to or choose one --nodepool"),
        {"NODEWRIGHT_MAX_CALENDAR_WINDOWS": "10"},
    ),
    # the signing key, an export's trailer and an anchor (issue 38, item 4)
    Case(
        "audit-key-file-missing",
        ("audit", "--from-file", "{event.jsonl}", "--key-file", "{no-such.key}"),
        ("no-such.key", "cannot read the key file"),
    ),
    Case(
        "audit-key-file-short",
        ("audit", "--from-file", "{event.jsonl}", "--key-file", "{short.key}"),
        ("short.key", "a signing key must be at least 32 bytes, not 5"),
        process=True,
    ),
    Case(
        "audit-key-file-huge",
        ("audit", "--from-file", "{event.jsonl}", "--key-file", "{huge.key}"),
        ("huge.key", "not a signing key: larger than 4096 bytes"),
    ),
    Case(
        "audit-signing-key-short",
        ("audit", "--from-file", "{event.jsonl}"),
        ("NODEWRIGHT_SIGNING_KEY", "a signing key must be at least 32 bytes, not 9"),
        {"NODEWRIGHT_SIGNING_KEY": "too-short"},
    ),
    Case(
        "run-signing-key-short",
        ("run", str(EXAMPLES.parent / "scenarios" / "burst-node-limit.yaml")),
        ("NODEWRIGHT_SIGNING_KEY: a signing key must be at least 32 bytes, not 9",),
        {"NODEWRIGHT_SIGNING_KEY": "too-short"},
    ),
    Case(
        "up-signing-key-short",
        ("up", "--for", "1"),
        ("NODEWRIGHT_SIGNING_KEY: a signing key must be at least 32 bytes",),
        {"NODEWRIGHT_SIGNING_KEY": "too-short"},
        process=True,
    ),
    Case(
        "delete-signing-key-short",
        ("delete", "nodeclaim", "web-1"),
        ("NODEWRIGHT_SIGNING_KEY", "at least 32 bytes"),
        {"NODEWRIGHT_SIGNING_KEY": "too-short"},
    ),
    Case(
        "audit-bad-trailer",
        ("audit", "--from-file", "{bad-trailer.jsonl}"),
        ("bad-trailer.jsonl:2", "not a trailer: trailer.events must be a count"),
        process=True,
    ),
    Case(
        "audit-anchor-no-position",
        ("audit", "--from-file", "{event.jsonl}", "--anchor", "{anchor-no-position.json}"),
        ("not an anchor: `position` must be a log position",),
    ),
    Case(
        "audit-anchor-edited",
        ("audit", "--from-file", "{event.jsonl}", "--anchor", "{anchor-edited.json}"),
        ("not an anchor: its `digest` does not match its content (the file was edited)",),
    ),
    Case(
        "audit-anchor-bad-streams",
        ("audit", "--from-file", "{event.jsonl}", "--anchor", "{anchor-bad-streams.json}"),
        ("not an anchor: streams.pod must be {streams: a count, heads: 64 hex digits}",),
    ),
]
BOUND_INVALID = [
    # (name, file, what stdout must say): `validate` exits 1 for each, naming the field and the rule
    ("expire", "{pool-expire.yaml}", ("spec.template.spec.expireAfter", _DURATION.format("876000000h"))),
    ("limit", "{pool-limit.yaml}", ("spec.limits[nodes]", _QUANTITY)),
    ("budget", "{pool-budget.yaml}", ("spec.disruption.budgets[0].duration", _DURATION.format("99999999999999999h"))),
    ("labels", "{pool-labels.yaml}", ("metadata.labels", "must be no more than 63 characters")),
    ("annotations", "{pool-annotations.yaml}", ("metadata.annotations", "may not be more than 262144 bytes")),
    ("zone", "{pool-zone.yaml}", ("spec.disruption.budgets[0].timeZone", 'unknown time zone "localtime"')),
    ("factory", "{pool-factory.yaml}", ("spec.disruption.budgets[0].timeZone", 'unknown time zone "Factory"')),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bad-input")
    for name, content in FILES.items():
        path = where / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return where


def _args(case: Case, where: Path) -> list[str]:
    """`{name}` is the file of that name."""
    return [str(where / a[1:-1]) if a.startswith("{") else a for a in case.args]


def _environment(case: Case, where: Path) -> dict[str, str]:
    """The case's settings, and a data directory of its own: nothing here may start a server."""
    return {"NODEWRIGHT_DATA_DIR": str(where / "data" / case.name), **case.env}


def _check(case: Case, code: int, out: str, err: str, where: Path) -> None:
    assert code == 2, (case.name, code, out, err)
    assert "Traceback" not in out + err, (case.name, err)
    for fragment in case.says:
        assert fragment in err, (case.name, fragment, err)
    assert not (where / "data" / case.name / "postgres").exists(), "a server was started"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_exits_2_naming_the_rule(case: Case, files: Path):
    result = CliRunner().invoke(app, _args(case, files), env=_environment(case, files))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    _check(case, result.exit_code, result.stdout, result.stderr, files)


def test_as_a_user_runs_it(files: Path):
    """The rows marked `process`, as real processes, two at a time."""
    exe = shutil.which("nodewright", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-m", "cli.main"]
    chosen = [c for c in CASES if c.process]

    def run(case: Case) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), **_environment(case, files)}
        argv = [*command, *_args(case, files)]
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(run, chosen))
    for case, process in zip(chosen, done, strict=True):
        _check(case, process.returncode, process.stdout, process.stderr, files)


def test_a_crash_exits_3_with_one_line_and_a_log(tmp_path, monkeypatch, capsys):
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("the validator broke\nand said more")

    monkeypatch.setattr(validate_cmd, "check_files", broken)
    monkeypatch.setattr(sys, "argv", ["nodewright", "validate", EXTENSIONS])
    monkeypatch.setenv("NODEWRIGHT_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == failures.EXIT_INTERNAL == 3
    log = (tmp_path / "data" / "logs" / "cli-errors.log").resolve()
    err = capsys.readouterr().err
    assert err == f"error: internal error: RuntimeError: the validator broke (details in {log})\n"
    assert "Traceback (most recent call last)" in log.read_text() and "nodewright validate" in log.read_text()

    (tmp_path / "file").write_text("")  # a data directory that cannot be made: a temporary file instead
    monkeypatch.setenv("NODEWRIGHT_DATA_DIR", str(tmp_path / "file"))
    with pytest.raises(SystemExit):
        main()
    fallback = Path(capsys.readouterr().err.split("(details in ")[1].rstrip(")\n"))
    assert fallback.name.startswith("nodewright-cli-error-") and "RuntimeError" in fallback.read_text()
    fallback.unlink()


@pytest.mark.parametrize(("name", "file", "says"), BOUND_INVALID, ids=[c[0] for c in BOUND_INVALID])
def test_a_value_past_its_bound_makes_validate_exit_1_naming_it(name, file, says, files: Path):
    result = CliRunner().invoke(app, ["validate", str(files / file[1:-1])])
    assert result.exit_code == 1, (name, result.output)
    assert "Traceback" not in result.output and result.stdout.startswith("INVALID a ")
    for fragment in says:
        assert fragment in result.stdout, (name, fragment, result.stdout)
