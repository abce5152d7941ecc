"""The local cluster of `nodewright up`: where the sim's Kubernetes API listens, its serving
certificate, and the tokens and kubeconfigs of the services and the user.

The API listens on 127.0.0.1 (at `--base-port` + 6, else a free port). Every start makes new
tokens (`shared.runtime.identities`): the services' kubeconfigs go to `<data dir>/kube/`, the
user's context `nodewright-<deployment>` to `<data dir>/kubeconfig`. A scenario's NodePools and
EC2NodeClasses are the user's: `up` applies them through the API as kubectl would (`apply`), and
the sim starts without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.config import Settings
from shared.runtime.identities import USERS_FILE, Identities
from shared.runtime.servers import free_tcp_port
from shared.runtime.tls import self_signed

API_PORT_OFFSET = 6
"""With --base-port, the API's port comes after the six services' health ports."""
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"
"""The sim's serving certificate and key: made here so every kubeconfig can trust it, and a
restarted sim serves the same one."""


class ApplyFailed(RuntimeError):
    """A scenario's NodePool or EC2NodeClass the API did not take (refused, or no answer)."""


@dataclass(frozen=True)
class LocalCluster:
    identities: Identities
    kube_dir: Path
    user_kubeconfig: Path
    context: str
    listen: str

    @property
    def server(self) -> str:
        return self.identities.server

    @classmethod
    def prepare(cls, config: Settings, base_port: int | None) -> LocalCluster:
        port = base_port + API_PORT_OFFSET if base_port is not None else free_tcp_port()
        return cls.create(config.data_dir, port, config.deployment)

    @classmethod
    def create(cls, data_dir: Path, port: int, deployment: str) -> LocalCluster:
        """New tokens and a new serving certificate for an API on 127.0.0.1:`port`, written
        under `data_dir` (the key readable by its owner alone)."""
        certificate, key = self_signed("127.0.0.1", datetime.now(UTC))
        identities = Identities.new(f"https://127.0.0.1:{port}", certificate)
        kube_dir = data_dir / "kube"
        identities.write(kube_dir)
        (kube_dir / TLS_CERT).write_bytes(certificate)
        (kube_dir / TLS_KEY).unlink(missing_ok=True)
        (kube_dir / TLS_KEY).touch(mode=0o600)
        (kube_dir / TLS_KEY).write_bytes(key)
        context = f"nodewright-{deployment}"
        user = data_dir / "kubeconfig"
        identities.write_user(user, context)
        return cls(identities, kube_dir, user, context, f"127.0.0.1:{port}")

    def environments(self) -> dict[str, dict[str, str]]:
        """What each process is told: the sim where to listen and whom to admit; each service
        its own kubeconfig."""
        out = {
            "sim": {
                "NODEWRIGHT_SIM_API_LISTEN": self.listen,
                "NODEWRIGHT_SIM_API_USERS": str(self.kube_dir / USERS_FILE),
                "NODEWRIGHT_SIM_API_TLS_CERT": str(self.kube_dir / TLS_CERT),
                "NODEWRIGHT_SIM_API_TLS_KEY": str(self.kube_dir / TLS_KEY),
            }
        }
        for service in self.identities.tokens:
            out[service] = {"NODEWRIGHT_KUBECONFIG": str(Identities.kubeconfig(self.kube_dir, service))}
        return out

    async def apply(self, documents: Sequence[Mapping[str, Any]]) -> None:
        """`kubectl apply` of each NodePool, EC2NodeClass or NodeOverlay as the user: created, or merge-patched
        when it is there already (a sim that restarted kept it). `ApplyFailed` says which was not
        taken and the API's answer (a 422 names the field)."""
        from shared.adapters.kube.api import MERGE_PATCH, Conflict
        from shared.adapters.kube.cluster import NODECLASSES, NODEPOOLS, KubeCluster
        from shared.adapters.kube.informer import OVERLAYS
        from shared.ports.cluster import ClusterError

        paths = {"NodePool": NODEPOOLS, "EC2NodeClass": NODECLASSES, "NodeOverlay": OVERLAYS.path}
        cluster = await KubeCluster.connect(str(self.user_kubeconfig), context=self.context)
        try:
            for document in documents:
                kind, name = str(document.get("kind", "NodePool")), document["metadata"]["name"]
                try:
                    try:
                        await cluster.api.call("POST", paths[kind], body=dict(document))
                    except Conflict as exc:
                        if exc.reason != "AlreadyExists":
                            raise
                        path = f"{paths[kind]}/{name}"
                        await cluster.api.call("PATCH", path, body=dict(document), content_type=MERGE_PATCH)
                except (ClusterError, OSError, TimeoutError) as exc:
                    raise ApplyFailed(f"{kind} {name} was not applied through the Kubernetes API: {exc}") from None
        finally:
            await cluster.close()
