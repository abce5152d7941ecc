"""Kubeconfig documents: one context and one bearer-token user per identity, one server.

`nodewright up` writes the user's (`.nodewright/kubeconfig`) and each service's, and tests write
their own; kubectl and `KubeCluster.connect` read them alike. Tokens are secrets, so the file is
created readable by its owner alone.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

CLUSTER = "nodewright"


class KubeconfigInputError(ValueError):
    pass


def kubeconfig_document(
    server: str, contexts: dict[str, str], *, certificate_authority: bytes | None = None
) -> dict[str, Any]:
    """A kubeconfig for `server` with a context and user per name in `contexts` (name -> bearer
    token); the first name is the current context. `certificate_authority`: the PEM an https
    server's certificate is checked against (the sim's own, self-signed)."""
    if not server.startswith(("http://", "https://")):
        raise KubeconfigInputError(f"server: {server!r} must be an http:// or https:// URL")
    if not contexts:
        raise KubeconfigInputError("contexts: at least one name -> token is needed")
    for name, token in contexts.items():
        if not name or not token:
            raise KubeconfigInputError(f"contexts: {name!r} needs a non-empty name and token")
    cluster: dict[str, str] = {"server": server}
    if certificate_authority is not None:
        cluster["certificate-authority-data"] = base64.b64encode(certificate_authority).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}} for name, token in contexts.items()],
        "contexts": [{"name": name, "context": {"cluster": CLUSTER, "user": name}} for name in contexts],
        "current-context": next(iter(contexts)),
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike[str], document: dict[str, Any]) -> Path:
    """Written whole with mode 0600 (a file already there is made 0600 before it is written)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as out:
        yaml.safe_dump(document, out, sort_keys=False)
    return target
