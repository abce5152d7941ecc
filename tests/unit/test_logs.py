"""The log's shape (Karpenter's JSON fields, or text for a terminal) and its secrets: what
`shared.runtime.logs.configure` makes of nodewright's act lines, of a library's lines and of an
exception."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from importlib import metadata

import pytest
import structlog

from shared import acts
from shared.config import Settings
from shared.redaction import redact
from shared.runtime import logs

PASSWORD = "hunter2-Sekrit"
DATABASE_URL = f"postgresql://nodewright:{PASSWORD}@db.internal:5432/nodewright"
ZAP_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def own_logging() -> Iterator[None]:
    """`configure` changes process-wide state: put it back for the other tests."""
    root = logging.getLogger()
    handlers, level, hook = root.handlers[:], root.level, sys.excepthook
    config = structlog.get_config()
    saved = os.environ.get(logs.FORMAT_ENV)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    sys.excepthook = hook
    structlog.configure(**config)
    logging.captureWarnings(False)
    if saved is None:
        os.environ.pop(logs.FORMAT_ENV, None)
    else:
        os.environ[logs.FORMAT_ENV] = saved


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def configured(fmt: str | None = None, **environ: str) -> io.StringIO:
    out = io.StringIO()
    logs.configure(fmt, stream=out, environ=environ)
    return out


def test_an_act_is_one_json_line_with_karpenters_fields_in_karpenters_order():
    out = configured()
    message, fields = acts.tainted_node("ip-10-0-1-7", "default-x2k9q", "karpenter.sh/disrupted", "", "NoSchedule")
    logs.controller("node.termination", kind="Node", group="").info(message, **fields)
    (line,) = lines(out)
    assert list(line)[:12] == [
        "level",
        "time",
        "logger",
        "message",
        "commit",
        "controller",
        "controllerGroup",
        "controllerKind",
        "Node",
        "namespace",
        "name",
        "reconcileID",
    ]
    assert line["level"] == "INFO" and ZAP_TIME.match(line["time"])
    assert line["logger"] == "controller" and line["message"] == "tainted node"
    assert line["commit"] == metadata.version("nodewright")
    assert (line["controller"], line["controllerGroup"], line["controllerKind"]) == ("node.termination", "", "Node")
    assert line["Node"] == {"name": "ip-10-0-1-7"} and line["name"] == "ip-10-0-1-7" and line["namespace"] == ""
    assert line["NodeClaim"] == {"name": "default-x2k9q"}
    assert (line["taint.Key"], line["taint.Effect"]) == ("karpenter.sh/disrupted", "NoSchedule")


def test_the_disruption_line_carries_the_command_id_and_the_lowercase_reason():
    out = configured()
    candidate = acts.Disrupted("ip-10-0-1-7", "m5.large", "spot", pods=2, nodeclaim="default-x2k9q")
    message, fields = acts.disrupting("3f1c", "Underutilized", "default", [candidate])
    logs.controller("disruption").info(message, **fields)
    (line,) = lines(out)
    assert (
        line["message"] == "disrupting nodeclaim(s) via delete, terminating 1 nodes (2 pods) ip-10-0-1-7/m5.large/spot"
    )
    assert (line["controller"], line["command-id"], line["reason"]) == ("disruption", "3f1c", "underutilized")
    assert "controllerKind" not in line and line["name"] == "" and line["reconcileID"]  # a singleton controller
    assert line["NodePool"] == {"name": "default"}


def test_a_logger_made_at_import_follows_the_configuration_made_later():
    early = logs.controller("provisioner")  # as a service module's, before its main configures
    out = configured()
    early.info("found provisionable pod(s)", Pods="default/web-0")
    (line,) = lines(out)
    assert (line["controller"], line["Pods"]) == ("provisioner", "default/web-0")


def test_a_librarys_line_and_a_warning_come_out_the_same_way():
    out = configured()
    logging.getLogger("nats.aio.client").warning("reconnecting to %s", "nats://10.0.0.1:4222")
    logging.getLogger("nodewright.bus").debug("not shown at INFO")
    (line,) = lines(out)
    assert (line["level"], line["logger"], line["message"]) == (
        "WARN",
        "nats.aio.client",
        "reconnecting to nats://10.0.0.1:4222",
    )
    assert line["commit"] and ZAP_TIME.match(line["time"])


def test_an_exception_is_its_error_and_its_stacktrace():
    out = configured()
    try:
        raise ConnectionError("the sim did not answer")
    except ConnectionError:
        logs.controller("provisioner").exception("failed launching nodeclaim")
    (line,) = lines(out)
    assert line["level"] == "ERROR" and line["error"] == "the sim did not answer"
    assert "Traceback (most recent call last)" in line["stacktrace"] and "ConnectionError" in line["stacktrace"]


def test_level_and_format_come_from_the_environment_and_a_wrong_value_falls_back_loudly():
    out = configured(NODEWRIGHT_LOG_LEVEL="warning", NODEWRIGHT_LOG_FORMAT="xml")
    logs.controller("disruption").info("quiet")
    logs.controller("disruption").warning("said")
    said = lines(out)
    assert [line["message"] for line in said] == [
        "NODEWRIGHT_LOG_FORMAT='xml' is neither json nor text; using json",
        "said",
    ]
    text = configured(NODEWRIGHT_LOG_FORMAT="text")
    logs.controller("node.termination", kind="Node", group="").info("deleted node", **acts.deleted_node("n1", "c1")[1])
    rendered = text.getvalue()
    assert "deleted node" in rendered and "controller=node.termination" in rendered
    with pytest.raises(json.JSONDecodeError):
        json.loads(rendered.splitlines()[0])


def test_a_command_passes_the_format_it_was_given_to_the_processes_it_starts(monkeypatch: pytest.MonkeyPatch):
    """`nodewright up --log-format text`: the children inherit NODEWRIGHT_LOG_FORMAT; without the
    flag the command's own lines are text and its children keep their default, JSON."""
    monkeypatch.delenv(logs.FORMAT_ENV, raising=False)
    assert logs.for_command(None) == logs.LogFormat.TEXT
    assert logs.FORMAT_ENV not in os.environ
    assert logs.for_command(logs.LogFormat.JSON) == logs.LogFormat.JSON
    assert os.environ[logs.FORMAT_ENV] == "json"


def test_no_line_shows_a_password_wherever_it_hides():
    nats_password = "n4ts-Password-77"
    out = configured(NODEWRIGHT_DATABASE_URL=DATABASE_URL, NODEWRIGHT_NATS_PASSWORD=nats_password)
    log = logs.controller("disruption")
    log.info("connecting to %s", DATABASE_URL)
    log.warning("store out of reach", url=DATABASE_URL, params={"user": "nodewright", "password": PASSWORD})
    logging.getLogger("asyncpg").error("connect(%r) failed", {"dsn": f"nats://svc:{nats_password}@nats:4222"})
    log.info("the password on its own: " + PASSWORD, nats_password=nats_password)
    try:
        raise OSError(f"cannot reach {DATABASE_URL}")
    except OSError:
        log.exception("gave up")
    rendered = out.getvalue()
    assert len(lines(out)) == 5
    assert PASSWORD not in rendered and nats_password not in rendered
    assert "postgresql://nodewright:***@db.internal:5432/nodewright" in rendered


def test_text_lines_are_masked_too():
    out = configured("text", NODEWRIGHT_DATABASE_URL=DATABASE_URL)
    try:
        raise OSError(f"cannot reach {DATABASE_URL}")
    except OSError:
        logs.controller("disruption").exception("gave up on %s", DATABASE_URL)
    assert PASSWORD not in out.getvalue() and "nodewright:***@db.internal" in out.getvalue()


def test_a_configuration_error_never_repeats_the_url_it_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NODEWRIGHT_DATABASE_URL", f"mysql://nodewright:{PASSWORD}@db.internal/nodewright")
    with pytest.raises(ValueError) as refused:
        Settings()
    assert "unsupported database URL scheme 'mysql'" in str(refused.value)
    assert PASSWORD not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql+asyncpg://u:p%40ss@h:5432/db?ssl=require", "postgresql+asyncpg://u:***@h:5432/db?ssl=require"),
        (
            "nats://svc:pw@nats-0:4222, nats://svc:pw@nats-1:4222",
            "nats://svc:***@nats-0:4222, nats://svc:***@nats-1:4222",
        ),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),  # an unescaped @: hidden whole
        ("host=h password=pw dbname=d", "host=h password=*** dbname=d"),
        ("{'user': 'u', 'password': 'pw'}", "{'user': 'u', 'password': '***'}"),
        ("nats://nats-0:4222 and nats://svc@nats-1:4222", "nats://nats-0:4222 and nats://svc@nats-1:4222"),
    ],
)
def test_redaction(text: str, shown: str):
    assert redact(text) == shown
