"""How the sim's __main__ reads where its Kubernetes API listens, who may use it and its
certificate; a setting that cannot be used is said with its name."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.sim.__main__ import api_options, nodepools_from, watch_history
from services.sim.api.rbac import UsersError
from services.sim.api.server import ApiOptions
from shared.runtime.tls import self_signed


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("127.0.0.1:6443", ("127.0.0.1", 6443)),
        (":0", ("127.0.0.1", 0)),
        ("8443", ("127.0.0.1", 8443)),
        ("[::1]:9", ("::1", 9)),
    ],
)
def test_the_listen_address_binds_127_0_0_1_unless_told(raw: str, expected: tuple[str, int]):
    assert ApiOptions.parse_listen(raw) == expected


@pytest.mark.parametrize("raw", ["host:", "host:99999", "host:http"])
def test_a_listen_address_that_cannot_be_used_names_the_setting(raw: str):
    with pytest.raises(ValueError, match="NODEWRIGHT_SIM_API_LISTEN"):
        ApiOptions.parse_listen(raw)


def test_users_and_a_self_signed_certificate_kubeconfigs_can_trust(tmp_path: Path):
    users = tmp_path / "users.yaml"
    users.write_text("users: [{name: admin, token: s3cret}]\n")
    options = api_options({"NODEWRIGHT_SIM_API_USERS": str(users)}, tmp_path / "data")
    assert options.users.authenticate("Bearer s3cret") is not None and (options.host, options.port) == ("127.0.0.1", 0)
    assert options.tls is not None and (tmp_path / "data" / "sim-api.crt").read_bytes() == options.tls[0]
    assert api_options({}, tmp_path / "data").users.authenticate("Bearer s3cret") is None  # no users: all 401


def test_a_given_certificate_is_served_and_half_of_one_is_refused(tmp_path: Path):
    cert, key = self_signed("127.0.0.1", datetime.now(UTC))
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    given = {
        "NODEWRIGHT_SIM_API_TLS_CERT": str(tmp_path / "tls.crt"),
        "NODEWRIGHT_SIM_API_TLS_KEY": str(tmp_path / "tls.key"),
    }
    assert api_options(given, tmp_path / "data").tls == (cert, key)
    with pytest.raises(ValueError, match="given together"):
        api_options({"NODEWRIGHT_SIM_API_TLS_CERT": str(tmp_path / "tls.crt")}, tmp_path / "data")
    (tmp_path / "bad.yaml").write_text("users: [{name: a}]\n")
    with pytest.raises(UsersError, match=r"users\[0\]\.token: Field required"):
        api_options({"NODEWRIGHT_SIM_API_USERS": str(tmp_path / "bad.yaml")}, tmp_path / "data")


@pytest.mark.parametrize(("raw", "seeded"), [(None, True), ("scenario", True), ("api", False)])
def test_the_world_starts_with_the_scenarios_nodepools_unless_its_user_applies_them(raw, seeded):
    environ = {} if raw is None else {"NODEWRIGHT_SIM_NODEPOOLS": raw}
    assert nodepools_from(environ) is seeded


def test_an_unknown_nodepools_source_names_the_setting_and_its_values():
    with pytest.raises(ValueError, match="NODEWRIGHT_SIM_NODEPOOLS is 'files': it is one of scenario, api"):
        nodepools_from({"NODEWRIGHT_SIM_NODEPOOLS": "files"})


@pytest.mark.parametrize(("raw", "kept"), [(None, None), ("", None), ("1", 1), ("40", 40)])
def test_the_watch_history_is_the_sims_default_unless_told(raw, kept):
    environ = {} if raw is None else {"NODEWRIGHT_SIM_WATCH_HISTORY": raw}
    assert watch_history(environ) == kept


@pytest.mark.parametrize("raw", ["0", "-3", "many", "1.5"])
def test_a_watch_history_that_cannot_be_used_names_the_setting_and_the_rule(raw):
    with pytest.raises(ValueError, match=r"NODEWRIGHT_SIM_WATCH_HISTORY is .*: it is a whole number of changes"):
        watch_history({"NODEWRIGHT_SIM_WATCH_HISTORY": raw})
