"""Kubeconfigs `nodewright up` writes: one context per identity, owner-only, read back by connect."""

from __future__ import annotations

import stat

import pytest

from shared.adapters.kube import KubeCluster, KubeconfigError, kubeconfig_document, write_kubeconfig
from shared.adapters.kube.kubeconfig import KubeconfigInputError

SERVER = "http://127.0.0.1:6443"


async def test_each_context_connects_with_its_own_token(tmp_path, monkeypatch):
    path = write_kubeconfig(
        tmp_path / "kube" / "config", kubeconfig_document(SERVER, {"user": "t-user", "watcher": "t-watcher"})
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    monkeypatch.setenv("KUBECONFIG", str(path))
    for context, token in (("user", "t-user"), ("watcher", "t-watcher")):
        cluster = await KubeCluster.connect(context=context)
        try:
            configuration = cluster.api.client.configuration
            assert configuration.host == SERVER
            assert (await configuration.auth_settings())["BearerToken"]["value"] == f"Bearer {token}"
        finally:
            await cluster.close()


async def test_an_existing_file_is_made_owner_only_before_the_tokens_go_in(tmp_path):
    path = tmp_path / "config"
    path.write_text("old")
    path.chmod(0o644)
    write_kubeconfig(path, kubeconfig_document(SERVER, {"user": "t"}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "old" not in path.read_text()


BAD_DOCUMENTS = [
    ("127.0.0.1:6443", {"user": "t"}, "server"),
    (SERVER, {}, "contexts"),
    (SERVER, {"user": ""}, "contexts"),
]


@pytest.mark.parametrize(("server", "contexts", "field"), BAD_DOCUMENTS)
def test_a_document_without_a_url_or_a_token_is_refused_by_field(server, contexts, field):
    with pytest.raises(KubeconfigInputError, match=field):
        kubeconfig_document(server, contexts)


async def test_a_kubeconfig_that_cannot_be_read_names_itself(tmp_path):
    path = write_kubeconfig(tmp_path / "config", kubeconfig_document(SERVER, {"user": "t"}))
    with pytest.raises(KubeconfigError, match=f"kubeconfig {path}.*nobody"):
        await KubeCluster.connect(str(path), context="nobody")
    with pytest.raises(KubeconfigError, match="kubeconfig"):
        await KubeCluster.connect(str(tmp_path / "missing"))
