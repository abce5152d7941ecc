"""The sim as a service: the world played on the shared clock, its cluster served as the
Kubernetes API (`services.sim.api`), its cloud reachable over NATS.

Every `tick` the world is advanced to the clock's now and, when anything changed, the API's
watches are woken. Cloud requests come on `<deployment>.sim.<caller>.<request>`
(`shared.adapters.sim` is the client), one subscription per request each service may send
(`shared.bus.topology.SIM_CALLERS`), so the sim knows who asks. A NATS request is answered only
as its caller's own: sent to it directly (not a JetStream delivery, which a push consumer's
deliver subject could aim at any subject, past every publish permission) with a reply subject in
the caller's inbox; anything else is refused, counted and never acted on. An answered request
first brings the world up to now, then acts on it. Each change is journaled
(`services.sim.journal`) before it is answered or any watch sees it, under one lock, so requests,
API writes and ticks never interleave and a restarted sim resumes the world that was seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

import structlog
from faststream.exceptions import SkipMessage
from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from prometheus_client import Counter

from services.sim.api import core as api
from services.sim.api.request import Request
from services.sim.api.server import ApiOptions, ApiServer
from services.sim.api.status import ApiError
from services.sim.journal import JOURNAL_FORMAT, Journal, JournalBroken, Step
from services.sim.kubelet import CloudInstances, SeenInstance
from services.sim.views import instance_type_view, instance_view, launch_request
from services.sim.world import World
from shared.adapters import sim as wire
from shared.api.scenario import Scenario
from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.service import ServiceShell
from shared.bus.topology import SIM_CALLERS
from shared.clock import Clock
from shared.ports.cloud import CloudError
from shared.ports.cluster import ClusterError

TICK_SECONDS = 0.1
log = structlog.get_logger("nodewright.sim")
READS = frozenset({wire.INSTANCE_TYPES, wire.LIST})
"""The requests that change nothing, so the journal skips them."""
KUBE_API = "kube-api"
"""The journal's name for a write through the Kubernetes API (its body: the request)."""
KUBELET = "kubelet"
"""The journal's name for what another cloud was seen to run (its body: the instances)."""
KUBELET_SECONDS = 1.0
"""How often the sim's kubelets look at another cloud's instances."""
JETSTREAM_HEADERS = ("Nats-Stream", "Nats-Sequence")
"""Headers JetStream sets on what it republishes from a stream (a request never carries them)."""


class UnknownStep(RuntimeError):
    """A journaled step this sim cannot take again: replaying past it would give another world."""


class Refused(SkipMessage):
    """A request not sent as its caller's own: no answer goes back, nothing is done."""


def refusal(names: BusNames, caller: str, raw: Msg) -> str | None:
    """Why a message on `caller`'s request subject is not a request of the caller's own, or None.
    JetStream's deliveries (their reply is an ack subject) and republished messages come from the
    server, whoever set them up; a reply elsewhere than the caller's inbox would have the sim
    answer, or act, for another."""
    reply = raw.reply or ""
    headers = raw.headers or {}
    if reply.startswith("$JS.") or any(header in headers for header in JETSTREAM_HEADERS):
        return "jetstream"
    if not reply:
        return "no-reply"
    if not reply.startswith(f"{names.inbox(caller)}."):
        return "foreign-inbox"
    return None


class SimService:
    def __init__(
        self,
        scenario: Scenario,
        clock: Clock,
        bus: BusSettings | str,
        *,
        port: int = 0,
        world: str | None = None,
        api: ApiOptions | None = None,
        nodepools: bool = True,
        watch_history: int | None = None,
        cloud_instances: CloudInstances | None = None,
        static_capacity: bool = False,
    ) -> None:
        """`world` names the journal a restart resumes (None: a new world nobody resumes); `api`:
        serve the Kubernetes API there (`api_url` once started); `nodepools`: as `World`'s;
        `watch_history`: changes kept for watches (`SimCluster.history`); `cloud_instances`:
        another cloud's live instances, which the sim's kubelets register as nodes;
        `static_capacity`: the gate its API admits static NodePools by (`SimCluster.static_capacity`)."""
        self.world = World(scenario, nodepools=nodepools)
        self.world.cluster.static_capacity = static_capacity
        if watch_history is not None:
            self.world.cluster.history = watch_history
        self.clock = clock
        self.cloud_instances = cloud_instances
        self.shell = ServiceShell("sim", bus, port=port)
        self.world_name = world or f"w{uuid.uuid4().hex}"
        self.journal: Journal | None = None
        self.woken = 0
        self._lock = asyncio.Lock()
        self._stopping: asyncio.Event | None = None
        self.routes: dict[str, Callable[[dict[str, Any]], Any]] = {
            wire.INSTANCE_TYPES: lambda body: [instance_type_view(t) for t in self.world.cloud.instance_types()],
            wire.CREATE: lambda body: instance_view(self.world.launch(launch_request(body))),
            wire.DELETE: lambda body: instance_view(self.world.terminate(body["providerID"])),
            wire.LIST: lambda body: [instance_view(i) for i in self.world.cloud.running()],
        }
        self.refused = Counter(
            "nodewright_sim_requests_refused_total",
            "Requests the sim refused, not sent as their caller's own (a JetStream delivery, a reply"
            " subject outside the caller's inbox, none), by caller, request and reason.",
            ["caller", "request", "reason"],
            registry=self.shell.registry,
        )
        for caller, requests in SIM_CALLERS.items():
            for request in requests:
                self.shell.router.subscriber(
                    self.shell.names.sim_request(caller, request),
                    title=f"sim:{caller}:{request}",
                    description=f"The sim answers {request} from the {caller}.",
                )(self._answer(caller, request))
        self.api = ApiServer(self, api) if api is not None else None
        self.shell.before_start.append(self._restore)
        self.shell.readiness.append(self._journal_takes_steps)

    def _answer(self, caller: str, request: str) -> Callable[..., Any]:
        if request not in self.routes:
            raise ValueError(f"SIM_CALLERS lets the {caller} send {request!r}, which the sim does not answer")

        async def answer(body: dict[str, Any], message: NatsMessage) -> Any:
            self._admit(caller, request, message.raw_message)
            return await self._serve(request, body)

        return answer

    async def _serve(self, request: str, body: dict[str, Any]) -> Any:
        """An admitted request: the world brought up to now, then acted on, journaled, watches woken."""
        async with self._lock:  # a step is journaled before anything can see what it did
            try:
                steps = self._advance()
                result = self._call(request, body)
                if request not in READS:
                    steps.append(Step(self.world.now, request, body))
                await self._write(steps)
            except Exception as exc:  # the world may hold what the journal does not
                _untrusted(exc)
        self._wake_watches()
        return result

    def _admit(self, caller: str, request: str, raw: Msg) -> None:
        """Every request passes here first; Refused ends one that is not its caller's own, with
        no answer (faststream replies only to what a handler returns)."""
        why = refusal(self.shell.names, caller, raw)
        if why is None:
            return
        self.refused.labels(caller, request, why).inc()
        log.warning(
            "refused a request not sent as its caller's own",
            caller=caller,
            request=request,
            reason=why,
            reply=raw.reply or None,
        )
        raise Refused(f"{caller} {request}: {why}")

    def _call(self, request: str, body: Any) -> Any:
        try:
            result = self.routes[request](body or {})
        except (ClusterError, CloudError) as exc:
            return {"error": {"type": type(exc).__name__, "message": str(exc)}}
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            return {"error": {"type": "BadRequest", "message": f"malformed request: {exc!r}"}}
        return {} if result is None else result

    async def _restore(self) -> None:
        """Once connected, before answering anything: the journal's stream (`nodewright bus setup`
        makes it), and the world an earlier process of this sim left, replayed (once per process:
        a start tried again after an outage has it already)."""
        js = self.shell.connection.jetstream()
        if self.journal is not None:
            self.journal.js = js
            await self.journal.require()
            return
        journal = Journal(js, self.shell.names, self.world_name)
        await journal.require()
        steps = await journal.read()
        self.replay(steps)
        if steps:
            log.info("resumed the world from its journal", world=self.world_name, steps=len(steps))
        self.journal = journal

    def replay(self, steps: list[Step]) -> None:
        """Take the journaled steps again, as they were first taken: an advance changed the world,
        a request's own advance (unjournaled) changed nothing but the instant."""
        for step in steps:
            if step.request is None:
                self._advance(step.at)
            elif step.request == KUBE_API:
                self.world.resume(step.at)
                api.handle(self.world.cluster, Request.from_dict(step.body or {}), self.world.now)
            elif step.request == KUBELET:
                self.world.resume(step.at)
                self.world.observe_cloud([SeenInstance.from_dict(i) for i in (step.body or {}).get("instances", [])])
            elif step.request in self.routes:
                self.world.resume(step.at)
                self._call(step.request, step.body)
            else:  # an older journal's request (the cluster's, over NATS): its world cannot be rebuilt
                raise UnknownStep(
                    f"the journal of world {self.world_name} holds a {step.request!r} step, which this sim"
                    f" no longer answers (journal format {JOURNAL_FORMAT}): start a new world"
                    " (NODEWRIGHT_SIM_WORLD) or purge this one"
                )

    # --- the Kubernetes API (services.sim.api) -----------------------------------------------------

    @property
    def api_url(self) -> str | None:
        return self.api.url if self.api is not None else None

    async def api_request(self, request: Request) -> api.Response:
        """One API request: the world brought up to now, then answered; a write is journaled (with
        its advance) before it is answered or any watch sees it, as a NATS request is."""
        if self.journal is None:
            return api.Response(503, ApiError(503, "ServiceUnavailable", "the sim is starting").status())
        async with self._lock:
            try:
                steps = self._advance()
                try:
                    response = api.handle(self.world.cluster, request, self.world.now)
                except Exception:
                    if request.writes:
                        raise  # a write cut short by a bug may have changed part of the world
                    log.exception("the sim's API failed to answer a read", path=request.path)
                    response = api.Response(500, ApiError(500, "InternalError", "the sim failed to answer").status())
                if request.writes:
                    steps.append(Step(self.world.now, KUBE_API, request.to_dict()))
                await self._write(steps)
            except Exception as exc:  # the world may hold what the journal does not
                _untrusted(exc)
        self._wake_watches()
        return response

    def api_lock(self) -> asyncio.Lock:
        return self._lock

    def api_state(self) -> tuple[Any, datetime]:
        return self.world.cluster, self.world.now

    async def _write(self, steps: list[Step]) -> None:
        if self.journal is None:
            raise RuntimeError("the sim acted before its journal was read")
        await self.journal.write(steps, self._stopping)

    async def _journal_takes_steps(self) -> str | None:
        return self.journal.failing if self.journal is not None else "the journal is not read yet"

    def _advance(self, to: datetime | None = None) -> list[Step]:
        """Bring the world up to the clock (or `to`); a failing scenario step is logged, never
        fatal. The step to journal, if the advance changed anything but the instant."""
        before = self.world.fingerprint()
        try:
            self.world.advance(self.clock.now() if to is None else to)
        except (ClusterError, CloudError, KeyError, ValueError):
            log.exception("a scenario step failed; the world goes on")
        return [Step(self.world.now)] if self.world.fingerprint() != before else []

    async def tick(self) -> None:
        """The world brought up to the clock, journaled if that changed it, watches woken."""
        async with self._lock:
            try:
                await self._write(self._advance())
            except Exception as exc:  # the world may hold what the journal does not
                _untrusted(exc)
        self._wake_watches()

    async def look_at_cloud(self) -> None:
        """The sim's kubelets see what another cloud runs now (a failed look is tried next time);
        journaled when it changed the world, like every other step."""
        if self.cloud_instances is None:
            return
        try:
            running = await self.cloud_instances()
        except Exception as exc:  # the cloud out of reach: its nodes stay as they were
            log.warning("could not list the cloud's instances", error=repr(exc))
            return
        async with self._lock:
            try:
                steps = self._advance()
                if self.world.observe_cloud(running):
                    steps.append(Step(self.world.now, KUBELET, {"instances": [i.to_dict() for i in running]}))
                await self._write(steps)
            except Exception as exc:  # the world may hold what the journal does not
                _untrusted(exc)
        self._wake_watches()

    def _wake_watches(self) -> None:
        """A new resource version wakes the API's watches; they read the changes themselves."""
        version = self.world.cluster.resource_version
        if version != self.woken and self.api is not None:
            self.api.notify()
        self.woken = version

    async def run(self, stopping: asyncio.Event, tick: float = TICK_SECONDS) -> None:
        self._stopping = stopping
        await self.shell.start(stopping)
        try:
            if self.api is not None and not stopping.is_set():
                await self.api.start()
            looked = 0.0
            loop = asyncio.get_running_loop()
            while not stopping.is_set():
                await self.tick()
                if self.cloud_instances is not None and loop.time() - looked >= KUBELET_SECONDS:
                    looked = loop.time()
                    await self.look_at_cloud()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), tick)
        finally:
            if self.api is not None:
                await self.api.stop()
            await self.shell.stop()


def _untrusted(exc: BaseException) -> NoReturn:
    """A step the journal did not take (refused, or cut short by a bug) leaves a world in memory
    that a restart would not rebuild: stop at once, before anyone sees it; the restart replays."""
    log.critical(
        "the sim's world is ahead of its journal; exiting so that a restart replays the journal",
        error=repr(exc),
        exc_info=not isinstance(exc, JournalBroken),
    )
    logging.shutdown()
    os._exit(3)
