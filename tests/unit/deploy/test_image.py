"""The Dockerfile, read by the official parser (the `dockerfile` package wraps BuildKit's): a build
stage that installs the project from pyproject.toml, a final stage with the environment alone (no
compiler, no package manager run), an unprivileged user, and a command that is a real
`nodewright` subcommand. No Docker engine is needed."""

from __future__ import annotations

import fnmatch
import tomllib
from typing import Any

import dockerfile
import pytest
import typer.main

from cli.main import app
from tests.unit.deploy.support import DOCKERFILE, HEALTH_PORT, METRICS_PORT, ROOT, resolve

BUILD_TOOLS = ("build-essential", "gcc", "g++", "make", "apt-get install", "apk add", "pip install")


@pytest.fixture(scope="module")
def stages() -> list[list[Any]]:
    """The instructions of each stage, in order (ARGs before the first FROM left out)."""
    out: list[list[Any]] = []
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        if command.cmd == "FROM":
            out.append([])
        if out:
            out[-1].append(command)
    return out


def _of(stage: list[Any], cmd: str) -> list[Any]:
    return [c for c in stage if c.cmd == cmd]


def test_two_stages_the_last_one_copying_the_first_ones_environment(stages):
    assert len(stages) == 2
    build, final = stages
    assert build[0].value[-2:] == ("AS", "build")
    copies = _of(final, "COPY")
    assert [c.flags for c in copies] == [("--from=build",)]
    assert copies[0].value[0] == copies[0].value[1] == "/opt/nodewright"
    assert any(
        "/opt/nodewright/bin/pip install -c constraints.txt ." in " ".join(run.value) for run in _of(build, "RUN")
    )


def test_the_final_stage_has_no_build_tools(stages):
    final = stages[-1]
    for run in _of(final, "RUN"):
        text = " ".join(run.value)
        assert not [tool for tool in BUILD_TOOLS if tool in text], text


def test_it_runs_as_an_unprivileged_user(stages):
    users = _of(stages[-1], "USER")
    assert len(users) == 1
    uid, _, gid = users[-1].value[0].partition(":")
    assert uid.isdigit() and int(uid) >= 1000, "numeric, so runAsNonRoot can check it"
    assert gid.isdigit() and int(gid) >= 1000
    after = stages[-1][stages[-1].index(users[-1]) + 1 :]
    assert not _of(after, "RUN"), "nothing runs as root after USER"
    assert any(f"--uid {uid}" in " ".join(run.value) for run in _of(stages[-1], "RUN"))


def test_its_command_is_nodewrights_and_chosen_by_whoever_runs_it(stages):
    """No entry point: compose and the manifests give the command (`nodewright service NAME`,
    checked there); by default the image prints `nodewright --help`."""
    cmd = _of(stages[-1], "CMD")
    assert len(cmd) == 1 and cmd[0].json, "the exec form: the service is process 1 and gets the signals"
    assert not _of(stages[-1], "ENTRYPOINT")
    assert list(cmd[0].value) == ["nodewright", "--help"]
    root = typer.main.get_command(app)
    assert any("--help" in p.opts for p in root.get_params(root.context_class(root)))
    resolve(["nodewright", "service", "scheduler", "--port", str(HEALTH_PORT)])
    env = dict(zip(*[iter(v for e in _of(stages[-1], "ENV") for v in e.value)] * 2, strict=True))
    assert env["PATH"] == "/opt/nodewright/bin:$PATH", "`nodewright` is the environment's"
    assert env["NODEWRIGHT_DATA_DIR"] == "/var/lib/nodewright"


def test_it_exposes_the_health_and_metrics_ports(stages):
    exposed = {int(p) for e in _of(stages[-1], "EXPOSE") for p in e.value}
    assert exposed == {HEALTH_PORT, METRICS_PORT}


def test_everything_the_install_needs_is_copied_and_not_ignored(stages):
    """pyproject.toml's packages and its readme are in the build context and copied."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set()
    for copy in _of(stages[0], "COPY"):
        copied |= {source.rstrip("/") for source in copy.value[:-1]}
    assert needed <= copied
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    for source in copied:
        assert (ROOT / source).exists(), source
        assert _included(source, ignore), f"{source} is left out of the build context by .dockerignore"
    assert not _included(".venv", ignore) and not _included("tests", ignore) and not _included(".git", ignore)


def _included(path: str, patterns: list[str]) -> bool:
    """.dockerignore's rule: the last pattern that matches decides; `!` includes again."""
    included = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        if fnmatch.fnmatch(path, pattern.removeprefix("!").rstrip("/")):
            included = negate
    return included
