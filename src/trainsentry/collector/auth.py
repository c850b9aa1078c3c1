"""Inspector access to the read API and the dashboard: tokens, login sessions, and the gate.

Two kinds of credential, never interchangeable:

* a node key (``trainsentry enroll NODE``) signs that node's batches; it authorises ``POST
  /v1/batches`` for that node only and **nothing else** — a node presenting its key as a bearer
  token is an unknown token (401), so no node can read its own or another node's data;
* an inspector token (``trainsentry enroll-inspector NAME``) authorises every read: send it as
  ``Authorization: Bearer <token>``, or trade it once at ``POST /login`` for a session cookie
  (``HttpOnly; SameSite=Strict``), which is what the dashboard in a browser uses.

Only SHA-256 digests of tokens and session ids are stored: both are 256-bit random strings, so a
plain hash is enough (no password stretching needed) and a stolen database does not let anyone in.

What stays open without a credential: ``/healthz``, ``/v1/stats`` (per-process and total counters,
no per-node data; the ingest benchmark reads it), the login page and the static assets (the
charting code). Ingest keeps its own check (the node's HMAC, :mod:`trainsentry.collector.store`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
import time
from http.cookies import SimpleCookie
from pathlib import Path

import orjson

TOKEN_PREFIX = "tsi_"            # so a leaked inspector token is recognisable (and never a hex node key)
SESSION_COOKIE = "ts_session"
SESSION_TTL_S = 12 * 3600.0
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}\Z")
OPEN_PATHS = frozenset({"/healthz", "/v1/stats", "/login", "/favicon.ico"})
OPEN_PREFIXES = ("/static/",)
INGEST_PATH = "/v1/batches"      # the node-HMAC path; the ingest route checks it itself

# The migration this module needs (registered in schema.MIGRATIONS under the next free number).
DDL = """
CREATE TABLE inspectors (
  inspector_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  token_sha256 TEXT NOT NULL UNIQUE,   -- hex digest of the token; the token itself is shown once
  created_at REAL NOT NULL,
  rotated_at REAL,
  revoked_at REAL
);
CREATE TABLE inspector_sessions (
  session_sha256 TEXT PRIMARY KEY,     -- hex digest of the cookie value
  inspector_id INTEGER NOT NULL REFERENCES inspectors(inspector_id),
  created_at REAL NOT NULL,
  expires_at REAL NOT NULL
);
"""


class AuthError(Exception):
    pass


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def enroll_inspector(conn: sqlite3.Connection, name: str, rotate: bool = False) -> str:
    """Create (or with ``rotate`` replace) an inspector's token; return it. Only its digest is stored."""
    if not _NAME_RE.match(name):
        raise AuthError(f"invalid inspector name {name!r}: must match {_NAME_RE.pattern}")
    token, now = new_token(), time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT inspector_id FROM inspectors WHERE name = ?", (name,)).fetchone()
        if row and not rotate:
            raise AuthError(f"inspector {name!r} already exists; pass --rotate to replace the token")
        if row:
            conn.execute("UPDATE inspectors SET token_sha256 = ?, rotated_at = ?, revoked_at = NULL "
                         "WHERE inspector_id = ?", (_digest(token), now, row[0]))
            conn.execute("DELETE FROM inspector_sessions WHERE inspector_id = ?", (row[0],))  # old logins end
        else:
            conn.execute("INSERT INTO inspectors (name, token_sha256, created_at) VALUES (?, ?, ?)",
                         (name, _digest(token), now))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return token


def inspector_for_token(conn: sqlite3.Connection, token: str) -> str | None:
    if not token.startswith(TOKEN_PREFIX):
        return None  # a node key, or anything else: never looked up
    row = conn.execute("SELECT name FROM inspectors WHERE token_sha256 = ? AND revoked_at IS NULL",
                       (_digest(token),)).fetchone()
    return row[0] if row else None


def inspector_for_session(conn: sqlite3.Connection, session: str, now: float | None = None) -> str | None:
    now = time.time() if now is None else now
    row = conn.execute("SELECT i.name FROM inspector_sessions s JOIN inspectors i USING (inspector_id) "
                       "WHERE s.session_sha256 = ? AND s.expires_at > ? AND i.revoked_at IS NULL",
                       (_digest(session), now)).fetchone()
    return row[0] if row else None


def open_session(conn: sqlite3.Connection, token: str, ttl_s: float = SESSION_TTL_S) -> str | None:
    """A new session id for a valid token (expired sessions are swept here), else None."""
    if inspector_for_token(conn, token) is None:
        return None
    session, now = secrets.token_urlsafe(32), time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM inspector_sessions WHERE expires_at <= ?", (now,))
        conn.execute("INSERT INTO inspector_sessions (session_sha256, inspector_id, created_at, expires_at) "
                     "SELECT ?, inspector_id, ?, ? FROM inspectors WHERE token_sha256 = ?",
                     (_digest(session), now, now + ttl_s, _digest(token)))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return session


def close_session(conn: sqlite3.Connection, session: str) -> None:
    conn.execute("DELETE FROM inspector_sessions WHERE session_sha256 = ?", (_digest(session),))


def session_cookie(value: str, max_age_s: float, secure: bool) -> str:
    attrs = f"{SESSION_COOKIE}={value}; Path=/; Max-Age={int(max_age_s)}; HttpOnly; SameSite=Strict"
    return attrs + ("; Secure" if secure else "")


def credentials(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """(bearer token, session cookie) from raw ASGI headers, either None when absent."""
    bearer = session = None
    for k, v in headers:
        if k == b"authorization":
            scheme, _, value = v.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                bearer = value.strip()
        elif k == b"cookie":
            try:
                jar = SimpleCookie(v.decode("latin-1"))
            except Exception:  # a malformed cookie header is no credential, not a 500
                continue
            if SESSION_COOKIE in jar:
                session = jar[SESSION_COOKIE].value
    return bearer, session


class InspectorGate:
    """ASGI middleware: every request except ingest and :data:`OPEN_PATHS` needs an inspector.

    Runs on the event loop with the loop thread's read connection: one indexed lookup by digest
    (tens of µs), so it costs nothing that matters. Ingest is passed through on the first string
    comparison, so the hot path pays for nothing either. The inspector's name is put in
    ``scope["state"]["inspector"]`` for the routes.
    """

    def __init__(self, app, reader):
        self.app = app
        self.reader = reader  # () -> sqlite3.Connection

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == INGEST_PATH or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return await self.app(scope, receive, send)
        bearer, session = credentials(scope["headers"])
        conn = self.reader()
        who = None
        if bearer is not None:
            who = inspector_for_token(conn, bearer)
        elif session is not None:
            who = inspector_for_session(conn, session)
        if who is None:
            return await self._refuse(scope, send, bearer is not None or session is not None)
        scope.setdefault("state", {})["inspector"] = who
        await self.app(scope, receive, send)

    async def _refuse(self, scope, send, had_credential: bool) -> None:
        accept = dict(scope["headers"]).get(b"accept", b"")
        if not scope["path"].startswith("/v1/") and scope["method"] == "GET" and b"text/html" in accept:
            # A browser opening a dashboard page: send it to the login form, back here afterwards.
            from urllib.parse import quote
            target = quote(scope["path"] + ("?" + scope["query_string"].decode("latin-1")
                                             if scope.get("query_string") else ""), safe="")
            await send({"type": "http.response.start", "status": 303,
                        "headers": [(b"location", f"/login?next={target}".encode()), (b"content-length", b"0")]})
            return await send({"type": "http.response.body", "body": b""})
        detail = ("the token or session is not valid (node keys do not authorise reads)" if had_credential
                  else "an inspector token is required: Authorization: Bearer <token>, or log in at /login")
        body = orjson.dumps({"error": "unauthorized", "detail": detail})
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="trainsentry"')]})
        await send({"type": "http.response.body", "body": body})


def enroll_inspector_in(db: str | Path, name: str, rotate: bool = False) -> str:
    """Open the database (migrating it) and enrol an inspector; what the CLI command and demo call."""
    from .schema import open_db
    conn = open_db(db)
    try:
        return enroll_inspector(conn, name, rotate)
    finally:
        conn.close()
