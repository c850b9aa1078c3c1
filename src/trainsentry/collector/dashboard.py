"""The inspector's dashboard, served by the collector itself: no front-end build, no extra server.

``install(app, collector)`` (one line in :func:`trainsentry.collector.app.create_app`) adds

* the inspector gate in front of every read (:class:`trainsentry.collector.auth.InspectorGate`);
* ``GET/POST /login`` and ``POST /logout`` (token → ``HttpOnly; SameSite=Strict`` session cookie);
* ``GET /v1/overview``, the fleet aggregated on the server (:mod:`trainsentry.collector.overview`);
* ``GET /v1/jobs/{job}/flops``, training FLOPs so far with an interval (:mod:`trainsentry.collector.jobflops`);
* the pages ``/dashboard`` (overview), ``/dashboard/nodes/{node}``, ``/dashboard/jobs/{job}``:
  server-rendered shells whose vanilla JS (``static/``) polls the read API and draws on canvas.

Pages carry a strict Content-Security-Policy (scripts and styles from this origin only, nothing
inline), so a node name can never become script even if escaping were missed somewhere.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from urllib.parse import parse_qs, quote

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from . import auth
from .jobflops import JobFlops
from .overview import Overview

STATIC = Path(__file__).with_name("static")
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_HEADERS = {"content-security-policy": _CSP, "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
            "cache-control": "no-store"}


def live_state(app: FastAPI) -> tuple[dict[str, dict], list[dict]]:
    """(verdict summary per node, jobs) from the live engine, or nothing while none is attached.

    The live engine (``collector/live.py``) owns verdicts; this only reads its current state.
    """
    live = getattr(app.state, "live", None)
    if live is None:
        return {}, []
    return live.overview_state()


def page(title: str, body: str, scripts: tuple[str, ...] = (), data: dict | None = None,
         inspector: str | None = None) -> Response:
    attrs = "".join(f' data-{k}="{html.escape(str(v), quote=True)}"' for k, v in (data or {}).items())
    nav = ""
    if inspector:
        nav = (f'<nav><a href="/dashboard">Overview</a><span class="who">{html.escape(inspector)}</span>'
               '<form method="post" action="/logout"><button type="submit">Log out</button></form></nav>')
    js = "".join(f'<script src="/static/{s}" defer></script>' for s in scripts)
    doc = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · trainsentry'
           f'</title><meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<link rel="stylesheet" href="/static/dashboard.css">{js}</head>'
           f'<body{attrs}><header><h1><a href="/dashboard">trainsentry</a> <small>{html.escape(title)}</small></h1>'
           f'{nav}</header><main>{body}</main></body></html>')
    return Response(doc, media_type="text/html; charset=utf-8", headers=_HEADERS)


_LOGIN_FORM = """
<section class="login"><h2>Inspector login</h2>
<p>Paste the token from <code>trainsentry enroll-inspector NAME</code>. Node keys cannot log in.</p>
<form method="post" action="/login" id="login">
<input type="hidden" name="next" value="{next}">
<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Log in</button></form>{error}</section>"""


def _safe_next(target: str | None) -> str:
    # Only paths on this server: never an absolute URL (open redirect) or a protocol-relative //host.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/dashboard"
    return target


def install(app: FastAPI, col) -> None:
    """Mount the gate, login, overview API, pages and static files on the collector's app."""
    # TRAINSENTRY_OVERVIEW_TTL_S=0 recomputes every request (the benchmark measures both ways)
    ttl_s = float(os.environ.get("TRAINSENTRY_OVERVIEW_TTL_S", "1.0"))
    overview = Overview(col.reader, lambda: live_state(app), ttl_s)
    app.state.overview = overview
    app.add_middleware(auth.InspectorGate, reader=col.reader)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    def who(request: Request) -> str | None:
        return request.scope.get("state", {}).get("inspector")

    @app.get("/login")
    def login_page(next: str | None = None, failed: int = 0) -> Response:
        error = '<p class="error">That token is not valid.</p>' if failed else ""
        return page("login", _LOGIN_FORM.format(next=html.escape(_safe_next(next), quote=True), error=error),
                    scripts=("login.js",))

    @app.post("/login")
    async def login(request: Request) -> Response:
        # async: runs on the loop thread, which owns the store's writer connection.
        form = parse_qs((await request.body())[:8192].decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        target = _safe_next((form.get("next") or [None])[0])
        session = auth.open_session(col.store.conn, token) if token else None
        if session is None:
            return Response(status_code=303, headers={"location": f"/login?failed=1&next={quote(target, safe='')}"})
        secure = request.url.scheme == "https"
        return Response(status_code=303, headers={"location": target,
                                                  "set-cookie": auth.session_cookie(session, auth.SESSION_TTL_S, secure)})

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        _, session = auth.credentials(request.scope["headers"])
        if session:
            auth.close_session(col.store.conn, session)
        return Response(status_code=303, headers={"location": "/login",
                                                  "set-cookie": auth.session_cookie("", 0, request.url.scheme == "https")})

    flops = JobFlops(col.reader)

    @app.get("/v1/jobs/{name}/flops")
    def get_job_flops(name: str) -> Response:
        from .verdicts import job as job_row
        j = job_row(col.reader(), name)
        if j is None:
            return Response(orjson.dumps({"error": "unknown_job", "detail": f"no job {name[:128]!r}"}), 404,
                            media_type="application/json")
        return Response(orjson.dumps(flops.get(j)), media_type="application/json")

    @app.get("/v1/overview")
    def get_overview(request: Request) -> Response:
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(overview.encoded(gzipped=True), media_type="application/json",
                            headers={"content-encoding": "gzip", "vary": "Accept-Encoding"})
        return Response(overview.encoded(), media_type="application/json", headers={"vary": "Accept-Encoding"})

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/")
    def root() -> Response:
        return Response(status_code=303, headers={"location": "/dashboard"})

    @app.get("/dashboard")
    def overview_page(request: Request) -> Response:
        body = ('<section id="summary" class="summary"></section>'
                '<section><h2>Jobs</h2><table id="jobs" class="grid"><thead><tr><th>job</th><th>verdict</th>'
                '<th>P(training)</th><th>nodes</th><th>started</th></tr></thead><tbody></tbody></table></section>'
                '<section><h2>Nodes</h2><input id="filter" placeholder="filter nodes" type="search">'
                '<table id="nodes" class="grid"><thead><tr><th>node</th><th>state</th><th>P(training)</th>'
                '<th>last seen</th><th>alerts</th><th>job</th><th>devices</th></tr></thead><tbody></tbody>'
                '</table></section><p class="foot" id="updated"></p>')
        return page("overview", body, ("common.js", "overview.js"), inspector=who(request))

    @app.get("/dashboard/nodes/{node}")
    def node_page(node: str, request: Request) -> Response:
        body = ('<section class="verdict" id="verdict"><h2 id="state">…</h2><p id="evidence"></p>'
                '<ul id="alerts"></ul></section>'
                '<section class="controls"><label>Range <select id="range">'
                '<option value="120">2 min</option><option value="300" selected>5 min</option><option value="900">15 min</option>'
                '<option value="3600">1 h</option><option value="21600">6 h</option><option value="86400">24 h</option>'
                '</select></label><label><input type="checkbox" id="live" checked> live</label>'
                '<span class="legend"><i class="sw tx"></i>TX <i class="sw rx"></i>RX <i class="sw pw"></i>power '
                '<i class="sw act"></i>activity <i class="sw un"></i>unmonitored</span></section>'
                '<div id="timeline-wrap"><h3>Verdict timeline</h3><canvas id="timeline" height="34"></canvas></div>'
                '<div id="devices"></div>')
        return page(f"node {node}", body, ("common.js", "plot.js", "node.js"), {"node": node}, who(request))

    @app.get("/dashboard/jobs/{job}")
    def job_page(job: str, request: Request) -> Response:
        body = ('<section id="job"><h2 id="job-state">…</h2><dl id="job-facts"></dl></section>'
                '<section><h2>Nodes</h2><table id="job-nodes" class="grid"><thead><tr><th>node</th><th>state</th>'
                '<th>P(training)</th><th>last seen</th></tr></thead><tbody></tbody></table></section>')
        return page(f"job {job}", body, ("common.js", "job.js"), {"job": job}, who(request))


def overview_json(app: FastAPI) -> dict:
    """The overview as a dict (tests and the benchmark use it without HTTP)."""
    return orjson.loads(app.state.overview.encoded())



