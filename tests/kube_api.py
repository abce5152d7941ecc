"""The sim's Kubernetes API for a test's in-process sim: a token per service and for the user,
and each service's `KubeCluster` over HTTPS, as `nodewright up` wires its processes."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from services.sim.api.rbac import Users
from services.sim.api.server import ApiOptions
from services.sim.service import SimService
from shared.adapters.kube import KubeCluster
from shared.clock import Clock
from shared.runtime.identities import Identities


class LocalApi:
    def __init__(self, directory: Path | None = None) -> None:
        self.identities = Identities.new("https://127.0.0.1")
        self.directory = directory or Path(tempfile.mkdtemp(prefix="nodewright-kube-"))
        self.options = ApiOptions(Users.parse(self.identities.users()))
        """What the SimService serves its API with (any free port, a certificate of its own)."""

    def served_by(self, sim: SimService) -> Identities:
        assert sim.api is not None and sim.api_url, "the sim serves no API (api=LocalApi().options)"
        return replace(self.identities, server=sim.api_url, certificate_authority=sim.api.certificate)

    async def connect(
        self, sim: SimService, service: str, clock: Clock | None = None, *, overlays: bool = False
    ) -> KubeCluster:
        """`service`'s cluster, with its token and rules, once the sim's API listens; `overlays`:
        it informs NodeOverlays too (the gate on)."""
        served = self.served_by(sim)
        served.write(self.directory)
        path = str(Identities.kubeconfig(self.directory, service))
        return await KubeCluster.connect(path, clock=clock, overlays=overlays)

    def user_kubeconfig(self, sim: SimService) -> Path:
        path = self.directory / "kubeconfig"
        self.served_by(sim).write_user(path, "nodewright")
        return path
