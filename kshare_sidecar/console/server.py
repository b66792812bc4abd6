"""The console's HTTP(S) listener: aiohttp's server on the sidecar's own event loop.

Why aiohttp (and not Starlette): its ``AppRunner``/``TCPSite`` start a server inside the running
loop with an ``ssl.SSLContext`` of our own, and a handler can read the TLS peer certificate from
the transport (mTLS principals) — Starlette needs an ASGI server (uvicorn) with its own
lifecycle and signal handling, and ASGI does not carry the peer certificate. One extra
dependency (the ``console`` extra), no build step, no template engine: pages are drawn by
pages.py with escaping by construction.

Each page is served twice: HTML at ``/...`` and the same data as JSON at ``/api/...``.
Everything a page needs (CSS, the small script) is served from here; nothing from elsewhere.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import orjson
from aiohttp import web

from ..auth.acls import ALLOW_ALL, CLUSTER_NAME, Decider, Op, Res
from ..auth.authorizer import AclsUnavailable
from ..config import SidecarConfig
from ..dlq.reader import ReadError, TopicReader
from ..dlq.redrive import RedriveRequest, progress
from . import actions, model, pages, pages_dlq
from .security import COOKIE, CSRF_HEADER, HEADERS, Guard, Identity, Refused, Session, plan, ssl_context

log = logging.getLogger("kshare.console")

FRAGMENT_HEADER = "X-Kshare-Fragment"


@dataclass
class Caller:
    """Who made the request being served (set by the middleware; a handler runs in its task)."""

    ident: Identity
    session: Session
    form: dict[str, str] = field(default_factory=dict)


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("kshare_console_caller", default=None)


def caller() -> Caller:
    c = _CALLER.get()
    assert c is not None, "outside a console request"
    return c


DEAD_LETTERS_SHOWN = 50
#: The redrive positions kept on the backend are read again at most this often (the page refreshes).
STORED_MAX_AGE_S = 10.0
_STATIC = {"console.css": "text/css", "console.js": "text/javascript"}


class Console:
    """The web console of one sidecar (docs/console.md). ``await start()``, ``await close()``."""

    def __init__(self, config: SidecarConfig, services: model.Services, *, authenticator: Any, authorizer: Any,
                 backend: Any, client_options: dict[str, Any]) -> None:
        self.config = config
        self.services = services
        self.plan = plan(config, authenticator)  # ConfigError: one line naming the key
        self.guard = Guard(self.plan, authenticator)
        self.authorizer = authorizer
        self.backend = backend
        self.actions = config.console.actions_enable
        self.sampler = model.Sampler(config.console.sample_interval_ms / 1000)
        bootstrap = config.backend.bootstrap_servers
        self.client_options = client_options
        self.reader = TopicReader(bootstrap, client_options, client_id="kshare-console")
        self.redrives = actions.Redrives(bootstrap_servers=bootstrap, client_options=client_options,
                                         max_rate=config.console.redrive_max_records_per_second,
                                         coordinates=self._coordinates)
        self.port = self.plan.port
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stored: tuple[float, list[dict[str, Any]]] | None = None

    @property
    def url(self) -> str:
        host = self.plan.host if ":" not in self.plan.host else f"[{self.plan.host}]"
        return f"{'https' if self.plan.tls else 'http'}://{host}:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024)
        get = [("/", self.groups), ("/api/groups", self.groups), ("/group", self.group), ("/api/group", self.group),
               ("/deadletters", self.deadletters), ("/api/deadletters", self.deadletters),
               ("/deadletter", self.deadletter), ("/api/deadletter", self.deadletter),
               ("/redrives", self.redrives_view), ("/api/redrives", self.redrives_view),
               ("/api/session", self.session), ("/static/{name}", self.static)]
        for path, handler in get:
            app.router.add_get(path, handler)
        for action in ("reset", "delete", "redrive", "redrive/stop"):
            for prefix in ("/actions/", "/api/actions/"):
                app.router.add_post(prefix + action, self.act)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.plan.host or None, self.plan.port,
                           ssl_context=ssl_context(self.config) if self.plan.tls else None)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        self._tasks.append(asyncio.create_task(self._sample_loop(), name="kshare-console-sampler"))
        if self.actions:
            self._tasks.append(asyncio.create_task(self.redrives.resume_unfinished(self._decider_for),
                                                   name="kshare-console-resume"))
        log.info("console on %s (%s, actions %s)", self.url,
                 "authentication: " + ", ".join(k for k, on in (("HTTP Basic", self.plan.basic),
                                                                 ("client certificates", self.plan.mtls)) if on)
                 if self.plan.required else "no authentication", "on" if self.actions else "off")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.redrives.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.reader.close()

    async def _sample_loop(self) -> None:
        while True:
            try:
                self.sampler.sample(self._rows())
            except Exception:
                log.exception("console: sampling failed")
            await asyncio.sleep(self.sampler.interval_s)

    def _rows(self) -> list[dict[str, Any]]:
        now = self.services.partitions.clock()
        return [model.group_summary(self.services, g, now) for g in model.group_ids(self.services)]

    def _coordinates(self, group: str) -> bool:
        coordinates = getattr(self.services.admin.groups, "coordinates", None)
        return coordinates is None or not coordinates(group)

    # -- every request -----------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if request.path.startswith("/static/"):
                response = await handler(request)
            else:
                self.guard.check_host(request.host)
                transport = request.transport
                peercert = transport.get_extra_info("peercert") if transport is not None else None
                ident = await self.guard.identify(request.headers, peercert, request.remote or "")
                cookie = request.cookies.get(COOKIE)
                sid, session = self.guard.session(cookie, ident.principal)
                _CALLER.set(Caller(ident, session))
                if request.method == "POST":
                    await self._check_post(request, session)
                response = await handler(request)
                if sid != cookie:
                    response.set_cookie(COOKIE, sid, **self.guard.cookie_attrs())
        except Refused as exc:
            response = self._refused(request, exc)
        except web.HTTPException as exc:
            response = exc
        for name, value in HEADERS.items():
            response.headers[name] = value
        return response

    async def _check_post(self, request: web.Request, session: Session) -> None:
        if not self.actions:
            raise Refused(403, "actions are off on this console (console.actions.enable = false)")
        form: dict[str, str] = {}
        if request.content_type == "application/json":
            body = await request.read()
            try:
                data = orjson.loads(body or b"{}")
            except orjson.JSONDecodeError:
                raise Refused(400, "the body is not JSON") from None
            form = {str(k): "" if v is None else str(v) for k, v in (data.items() if isinstance(data, dict) else ())}
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        token = request.headers.get(CSRF_HEADER) or form.get("csrf")
        self.guard.check_change(session=session, token=token, origin=request.headers.get("Origin"),
                                referer=request.headers.get("Referer"), scheme=request.scheme, host=request.host)
        caller().form = form

    def _refused(self, request: web.Request, exc: Refused) -> web.StreamResponse:
        headers = {"WWW-Authenticate": 'Basic realm="kshare console", charset="UTF-8"'} if exc.basic else None
        if _wants_json(request):
            return web.Response(status=exc.status, body=orjson.dumps({"error": exc.message}),
                                content_type="application/json", headers=headers)
        current = _CALLER.get()
        session = current.session if current is not None else None
        ident = current.ident if current is not None else None
        ctx = pages.PageContext(ident.principal if ident else "-", session.csrf if session else "", False,
                                self.services.node_id, "/api/groups", [("error", exc.message)], refresh_ms=0)
        body = pages.document(f"{exc.status}", pages.tag("p", tag_text(exc.status)), ctx)
        return web.Response(status=exc.status, text=body, content_type="text/html", headers=headers)

    async def _decider(self, request: web.Request) -> Decider:
        ident = caller().ident
        return await self._decider_of(ident.principal, ident.host, ident.protocol)

    async def _decider_of(self, principal: str, host: str, protocol: str) -> Decider:
        if self.authorizer is None:
            return ALLOW_ALL
        try:
            return await self.authorizer.decider(principal, host, protocol)
        except AclsUnavailable as exc:  # fail closed, retriable
            raise Refused(503, f"ACLs could not be read from the backend now: {exc}") from None

    async def _decider_for(self, principal: str) -> Decider:
        return await self._decider_of(principal, "", "SSL")

    def _ctx(self, request: web.Request, json_url: str) -> pages.PageContext:
        session = caller().session
        flash, session.flash = session.flash, []
        return pages.PageContext(caller().ident.principal, session.csrf, self.actions, self.services.node_id,
                                 json_url, flash, refresh_ms=self.config.console.sample_interval_ms)

    def _page(self, request: web.Request, page: pages.Html) -> web.Response:
        if request.headers.get(FRAGMENT_HEADER):  # the refresh script: <main>'s content only
            start, end = page.find('<main id="main"'), page.rfind("</main>")
            page = pages.Html(page[page.index(">", start) + 1:end])
        return web.Response(text=page, content_type="text/html")

    # -- pages -------------------------------------------------------------------------------
    async def groups(self, request: web.Request) -> web.Response:
        decider = await self._decider(request)
        everyone = decider.unrestricted or decider.allows(Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
        rows = [r for r in self._rows() if everyone or decider.allows(Op.DESCRIBE, Res.GROUP, r["group_id"])]
        for r in rows:
            r.update(self.sampler.rates(r["group_id"]))
        history = {r["group_id"]: self.sampler.history(r["group_id"]) for r in rows}
        if _wants_json(request):
            return _json({"node_id": self.services.node_id, "groups": rows, "history": history})
        return self._page(request, pages.groups_page(rows, history, self._ctx(request, "/api/groups")))

    async def group(self, request: web.Request) -> web.Response:
        group_id = request.query.get("id", "")
        decider = await self._decider(request)
        actions.require(decider, Op.DESCRIBE, Res.GROUP, group_id)
        if group_id not in model.group_ids(self.services):
            raise Refused(404, f"share group {group_id!r} is not known to this sidecar")
        detail = await model.group_detail(self.services, group_id, self.sampler)
        hidden = {p["topic"] for p in detail["partitions"]} | {o["topic"] for o in detail["not_loaded"]}
        hidden = {t for t in hidden if not decider.allows(Op.DESCRIBE, Res.TOPIC, t)}
        detail["partitions"] = [p for p in detail["partitions"] if p["topic"] not in hidden]
        detail["not_loaded"] = [o for o in detail["not_loaded"] if o["topic"] not in hidden]
        if _wants_json(request):
            return _json(detail)
        topics = sorted({p["topic"] for p in detail["partitions"]} | {o["topic"] for o in detail["not_loaded"]})
        ctx = self._ctx(request, pages.url("/api/group", id=group_id))
        return self._page(request, pages.group_page(detail, ctx, topics=topics))

    def _dlq_topics(self) -> list[str]:
        topics = {model.dlq_topic(self.services, g) for g in model.group_ids(self.services)}
        topics.add(self.config.deadletter.topic_name)
        return sorted(t for t in topics if t)

    async def deadletters(self, request: web.Request) -> web.Response:
        q = request.query
        topics = self._dlq_topics()
        topic = q.get("topic") or (topics[0] if len(topics) == 1 else "")
        group = q.get("group", "")
        view: dict[str, Any] = {"topics": topics, "topic": topic, "group": group, "records": [], "older": {},
                                "partitions": [], "total": 0, "shown": 0}
        if topic:
            actions.require(await self._decider(request), Op.READ, Res.TOPIC, topic)
            try:
                await self._read_letters(view, _int(q.get("partition")), _int(q.get("before")))
            except ReadError as exc:
                view["error"] = str(exc)
        if _wants_json(request):
            return _json(view)
        return self._page(request, pages_dlq.deadletters_page(view, self._ctx(request, pages.url(
            "/api/deadletters", topic=topic, group=group))))

    async def _read_letters(self, view: dict[str, Any], partition: int | None, before: int | None) -> None:
        topic = view["topic"]
        bounds = await self.reader.bounds(topic)
        view["partitions"] = sorted(bounds)
        view["total"] = sum(end - begin for begin, end in bounds.values())
        letters = []
        for p, (begin, end) in sorted(bounds.items()):
            if partition is not None and p != partition:
                continue
            stop = min(end, before) if before is not None and partition is not None else end
            start = max(begin, stop - DEAD_LETTERS_SHOWN)
            if stop > start:
                got, _ = await self.reader.dead_letters(topic, p, start, DEAD_LETTERS_SHOWN, end=stop)
                letters += got
            if start > begin:
                view["older"][p] = start
        if view["group"]:
            letters = [d for d in letters if d.group == view["group"]]
        letters.sort(key=lambda d: (d.timestamp, d.offset), reverse=True)
        view["records"] = [d.as_dict() for d in letters[:DEAD_LETTERS_SHOWN]]
        view["shown"] = len(view["records"])

    async def deadletter(self, request: web.Request) -> web.Response:
        q = request.query
        topic, partition, offset = q.get("topic", ""), _int(q.get("partition")), _int(q.get("offset"))
        if not topic or partition is None or offset is None:
            raise Refused(400, "topic, partition and offset are required")
        actions.require(await self._decider(request), Op.READ, Res.TOPIC, topic)
        try:
            letters, _ = await self.reader.dead_letters(topic, partition, offset, 1, end=offset + 1)
        except ReadError as exc:
            raise Refused(404, str(exc)) from None
        if not letters:
            raise Refused(404, f"{topic}-{partition} has no record at offset {offset}")
        data = letters[0].as_dict(limit=16 * 1024)
        if _wants_json(request):
            return _json(data)
        ctx = self._ctx(request, pages.url("/api/deadletter", topic=topic, partition=partition, offset=offset))
        return self._page(request, pages_dlq.deadletter_page(data, ctx))

    async def redrives_view(self, request: web.Request) -> web.Response:
        view: dict[str, Any] = {"redrives": [s.as_dict() for s in self.redrives.statuses()]}
        now = asyncio.get_running_loop().time()
        if self._stored is None or now - self._stored[0] > STORED_MAX_AGE_S:  # not an admin request per refresh
            try:
                self._stored = (now, await progress(self.config.backend.bootstrap_servers, self.client_options))
            except Exception as exc:  # noqa: BLE001 - the page still shows the local redrives
                view["error"] = f"positions on the backend could not be read: {exc}"
        if self._stored is not None:
            view["stored"] = self._stored[1]
        if _wants_json(request):
            return _json(view)
        return self._page(request, pages_dlq.redrives_page(view, self._ctx(request, "/api/redrives")))

    async def session(self, request: web.Request) -> web.Response:
        """For scripts: the principal and the token that POSTs to /api/actions/... carry."""
        return _json({"principal": caller().ident.principal, "csrf": caller().session.csrf,
                      "actions": self.actions, "csrf_header": CSRF_HEADER})

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _STATIC:
            raise web.HTTPNotFound()
        data = resources.files(__package__).joinpath("static", name).read_bytes()
        return web.Response(body=data, content_type=_STATIC[name], headers={"Cache-Control": "max-age=300"})

    # -- actions -----------------------------------------------------------------------------
    async def act(self, request: web.Request) -> web.StreamResponse:
        form = caller().form
        action = request.path.split("/actions/", 1)[1]
        decider = await self._decider(request)
        group = form.get("group", "")
        back = pages.url("/group", id=group)
        if action == "reset":
            line = await actions.reset_start_offset(self.services.admin, self.backend, decider, group,
                                                    form.get("to", ""), _int(form.get("offset")),
                                                    form.get("topic") or None)
        elif action == "delete":
            line, back = await actions.delete_group(self.services.admin, decider, group), "/"
        elif action == "redrive":
            line = self._redrive(form, decider, caller().ident.principal)
            back = "/redrives"
        else:  # redrive/stop
            name = form.get("name", "")
            if not self.redrives.stop(name):
                raise Refused(404, f"no redrive {name!r} is running in this sidecar")
            line, back = f"redrive {name} stops after the chunk in flight", "/redrives"
        if _wants_json(request):
            return _json({"ok": True, "message": line})
        caller().session.flash.append(("ok", line))
        raise web.HTTPSeeOther(back)

    def _redrive(self, form: dict[str, str], decider: Decider, principal: str) -> str:
        group, dlq = form.get("group", ""), form.get("dlq_topic", "").strip()
        target = form.get("target", "").strip()
        if not group or not dlq:
            raise Refused(400, "group and dlq_topic are required")
        rate = _int(form.get("rate")) or self.config.console.redrive_max_records_per_second
        if rate < 1:
            raise Refused(400, f"rate = {rate}: a redrive needs at least 1 record/s")
        actions.require(decider, Op.READ, Res.GROUP, group)
        actions.require(decider, Op.READ, Res.TOPIC, dlq)
        if target:
            actions.require(decider, Op.WRITE, Res.TOPIC, target)
        skip = form.get("skip_missing", "") in ("1", "true", "on")
        redrive = self.redrives.start(RedriveRequest(group, dlq, target, float(rate), skip, principal), decider)
        log.info("console: redrive %s started by %s (to %s, %d records/s)", redrive.name, principal,
                 target or "source topics", rate)
        return f"redrive of {group}'s dead letters in {dlq} started ({rate} records/s)"


def tag_text(status: int) -> str:
    return {401: "Authentication required.", 403: "Refused.", 404: "Not found.", 409: "Not done.",
            421: "Wrong address.", 503: "Unavailable now; try again."}.get(status, "Error.")


def _wants_json(request: web.Request) -> bool:
    return request.path.startswith("/api/")


def _json(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), content_type="application/json")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        raise Refused(400, f"{value!r} is not a whole number") from None
