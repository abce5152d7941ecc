"""The Kubernetes API the sim serves over its world, as kwok's fake nodes sit behind a real API
server: kubectl and the services' kubernetes_asyncio adapter (`shared.adapters.kube`) reach the
sim's cluster through it.

A pure core answers a request from the world and the instant (`core.handle`: discovery and
OpenAPI, reads in `served`, writes in `writes`, watches as `core.watch_step`s), so it is
testable without HTTP and a journaled write is replayed by handling it again
(`services.sim.service`). The aiohttp shell (`server`) checks bearer tokens and RBAC rules
(`rbac`), serves HTTPS (`tls`: client-go sends a token over TLS only) and streams watches, woken
by every change of the world. Settings (`services.sim.__main__`): `NODEWRIGHT_SIM_API_LISTEN`
(host:port, 127.0.0.1 unless told), `NODEWRIGHT_SIM_API_USERS` (the users file),
`NODEWRIGHT_SIM_API_TLS_CERT` and `_KEY` (else a self-signed certificate in
`<data dir>/sim-api.crt`).
"""
