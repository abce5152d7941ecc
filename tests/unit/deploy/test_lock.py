"""Reproducible installs: `constraints.txt` pins every package exactly, every requirement of the
project (extras included) is among them, the Makefile (so CI, through `make test`) and the
Dockerfile install with it, and the environment running these tests holds exactly its versions."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import dockerfile
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.unit.deploy.support import DOCKERFILE, ROOT

LOCK = ROOT / "constraints.txt"
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)")


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        found = PIN.fullmatch(line.strip())
        assert found, f"constraints.txt: {line!r} is not name==version"
        out[canonicalize_name(found["name"])] = found["version"]
    return out


def test_every_requirement_of_the_project_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in ("dev", "embedded", "bench"):
        wanted += project["optional-dependencies"][extra]
    pinned = pins()
    missing = [r for r in wanted if canonicalize_name(Requirement(r).name) not in pinned]
    assert missing == []
    unsatisfied = [
        r for r in wanted if not Requirement(r).specifier.contains(pinned[canonicalize_name(Requirement(r).name)])
    ]
    assert unsatisfied == []


def test_the_makefile_and_the_image_install_with_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PINNED := -c constraints\.txt$", makefile, re.M)
    installs = [line for line in makefile.splitlines() if "pip install" in line and "-e '." in line]
    assert installs and all("$(PINNED)" in line for line in installs)
    assert re.search(r"^\$\(STAMP\): .*constraints\.txt", makefile, re.M)  # a new lock reinstalls
    commands = list(dockerfile.parse_file(str(DOCKERFILE)))
    assert any(c.cmd == "COPY" and "constraints.txt" in c.value for c in commands)
    assert any(c.cmd == "RUN" and "pip install -c constraints.txt ." in " ".join(c.value) for c in commands)


def test_this_environment_holds_exactly_the_pinned_versions():
    """On a fresh machine (CI), `make test` installed the lock: every pinned package present here
    is at its pinned version."""
    drifted = {}
    for name, version in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # an extra this environment did not ask for (bench), or another platform's
        if installed != version:
            drifted[name] = (installed, version)
    assert drifted == {}
