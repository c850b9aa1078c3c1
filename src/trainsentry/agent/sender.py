"""The sender: posts spooled batches to the collector oldest-first, one at a time, over HTTP/1.1.

One connection is kept open between batches (:class:`Connection`): a new TCP connection and
urllib's handler chain per batch cost about as much CPU as everything else the agent does in that
second. A connection the collector closed while idle is reopened and the batch sent once more
(safe: a resent batch is answered "duplicate"). Where an HTTP proxy is configured for the collector
(``http_proxy`` / ``https_proxy`` without a matching ``no_proxy``), each batch goes through urllib,
which honours it.

Strictly in order and one in flight: the collector accepts ``seq`` only after ``seq - 1``, so
pipelining would just produce out-of-order rejections.

Stored is not yet durable: with ``--sync normal`` the collector fsyncs its WAL about every 0.25 s,
and each receipt says how far the node's chain is committed (``stored_seq``) and how far it is on
disk (``durable_seq``). A batch leaves the spool only once a receipt's ``durable_seq`` covers it; a
stored one is not sent again (``_stored_through``), except, when ``durable_poll_s`` passes with no
receipt (nothing new to send; the agent sets it above its batch interval), the newest stored one,
whose "duplicate" receipt brings the current ``durable_seq`` and frees every stored batch it covers. After a power loss took what the collector had stored but not synced, its 409
``out_of_order`` names the first seq it lacks and the sender resends from there. Responses:

* 200 (stored, or ``{"duplicate": true}`` for a batch it already has): the batch counts as stored;
  every pending batch up to the receipt's ``durable_seq`` (and no further than this batch: the
  receipt vouches for this chain only up to it) is deleted from the spool. A collector from before
  the watermark sends no ``durable_seq``; its receipt meant committed, and is taken as before (with
  a warning, once).
* 409 ``out_of_order`` with ``expected_seq = E`` below the oldest pending batch: the collector lacks
  batches the agent no longer holds (it lost data it had reported durable). The agent declares
  ``E .. oldest-1`` lost with ``gap_from`` (logged as an error, never silently) and carries on.
* 409 ``out_of_order`` with ``E`` among the pending batches: the collector lacks ``E`` on (a power
  loss took batches it had stored, not synced); the sender resends from ``E``.
* 409 ``replay`` / ``chain_broken``: the collector holds a chain this spool did not write (a wiped
  or swapped spool, two agents under one node id). Nothing is dropped; the agent logs once and
  keeps backing off until an operator acts.
* 401/400/413/other 4xx: a configuration or software fault. Logged loudly, the batch is kept, and the
  sender backs off (it must neither drop data nor hammer the collector).
* connection errors, timeouts, 5xx: the collector is away; exponential backoff, then resend the same
  bytes.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from ..wire.batch import NODE_HEADER, SIGNATURE_HEADER, digest
from .spool import Spool, SpooledBatch

log = logging.getLogger(__name__)

BATCHES_PATH = "/v1/batches"


@dataclass
class SenderStats:
    sent: int = 0            # batches acknowledged as newly stored
    duplicates: int = 0      # acknowledged as already stored
    samples_sent: int = 0
    declared_lost: int = 0   # batches declared lost with gap_from
    durable_polls: int = 0   # stored batches resent only to learn the collector's durable_seq
    durable_seq: int = -1    # the collector's last reported durable watermark (-1: none, or null)
    failures: int = 0        # attempts that did not end in an acknowledgement
    last_error: str = ""


@dataclass(frozen=True)
class Response:
    status: int              # HTTP status, or 0 when no HTTP answer came back
    body: dict


def post(url: str, node: str, batch: SpooledBatch, timeout_s: float) -> Response:
    req = urllib.request.Request(url, data=batch.body, method="POST", headers={
        "Content-Type": "application/json", NODE_HEADER: node, SIGNATURE_HEADER: batch.signature})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return Response(resp.status, _json(resp.read()))
    except urllib.error.HTTPError as e:
        return Response(e.code, _json(e.read()))
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        return Response(0, {"error": "unreachable", "message": f"{type(reason).__name__}: {reason}"})


class Connection:
    """Posts batches to one collector URL over a kept-open HTTP/1.1 connection (see the module doc)."""

    def __init__(self, url: str, timeout_s: float):
        self.url = url
        self.timeout_s = timeout_s
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"collector URL must be http(s)://HOST[:PORT]/..., got {url!r}")
        self._cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self._host, self._port = u.hostname, u.port
        self._path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        proxied = u.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(u.hostname)
        self.via_urllib = proxied
        self._conn: http.client.HTTPConnection | None = None

    def post(self, node: str, batch: SpooledBatch) -> Response:
        if self.via_urllib:
            return post(self.url, node, batch, self.timeout_s)
        headers = {"Content-Type": "application/json", NODE_HEADER: node, SIGNATURE_HEADER: batch.signature}
        for attempt in (1, 2):
            reused = self._conn is not None
            try:
                if self._conn is None:
                    self._conn = self._cls(self._host, self._port, timeout=self.timeout_s)
                self._conn.request("POST", self._path, body=batch.body, headers=headers)
                resp = self._conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self.close()
                return Response(resp.status, _json(data))
            except (http.client.HTTPException, OSError) as e:
                self.close()
                # An idle kept-open connection the server has since closed fails at once: once more.
                if reused and attempt == 1 and isinstance(e, (http.client.RemoteDisconnected, ConnectionError)):
                    continue
                return Response(0, {"error": "unreachable", "message": f"{type(e).__name__}: {e}"})
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _json(raw: bytes) -> dict:
    try:
        obj = json.loads(raw or b"{}")
    except ValueError:
        return {"error": "non_json_response", "message": raw[:200].decode("utf-8", "replace")}
    if isinstance(obj, dict) and isinstance(obj.get("detail"), dict):  # FastAPI's HTTPException shape
        obj = {**obj, **obj["detail"]}
    return obj if isinstance(obj, dict) else {"value": obj}


class Sender(threading.Thread):
    def __init__(self, spool: Spool, collector_url: str, node: str, timeout_s: float = 10.0,
                 backoff_min_s: float = 0.2, backoff_max_s: float = 30.0, durable_poll_s: float = 2.0):
        super().__init__(name="trainsentry-sender", daemon=True)
        self.spool = spool
        self.url = collector_url.rstrip("/") + BATCHES_PATH
        self.connection = Connection(self.url, timeout_s)
        self.node = node
        self.timeout_s = timeout_s
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.stats = SenderStats()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._backoff = 0.0
        self._held_seq: int | None = None   # seq the 409-fork state is stuck on, to log once
        # Above the batch interval, so a steady stream's next receipt brings durable_seq, not a poll.
        self.durable_poll_s = durable_poll_s
        self._stored_through = -1           # the collector has stored every pending batch up to this seq
        self._poll_at = 0.0                 # monotonic time from which a stored batch is resent (a poll)
        self._legacy_warned = False

    def notify(self) -> None:
        """A new batch is in the spool."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                batch = self.next_batch()
                if batch is None:  # nothing to send, or nothing until the next poll
                    wait = self._poll_at - time.monotonic()
                    self._wake.wait(min(1.0, wait) if wait > 0 else 1.0)
                    self._wake.clear()
                    continue
                if self.send_one(batch):
                    self._backoff = 0.0
                else:
                    self._sleep_backoff()
        finally:
            self.connection.close()

    def _sleep_backoff(self) -> None:
        self._backoff = min(self.backoff_max_s, max(self.backoff_min_s, self._backoff * 2))
        # Jitter so that many agents coming back after a collector outage do not arrive in lockstep.
        self._stopping.wait(self._backoff * random.uniform(0.75, 1.0))

    def next_batch(self) -> SpooledBatch | None:
        """The oldest batch the collector has not stored; when there is none and ``durable_poll_s``
        has passed since the last receipt, a stored one not yet durable (a poll): the newest, so that
        one receipt's ``durable_seq`` can free every stored batch at once."""
        batch = self.spool.oldest(after=self._stored_through)
        if batch is None and time.monotonic() >= self._poll_at:
            batch = self.spool.get(self._stored_through) or self.spool.oldest()
        return batch

    def drain(self, timeout_s: float) -> bool:
        """Wait until the spool is empty (every batch durably stored) or ``timeout_s`` passes; True
        when empty."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.spool.pending_stats()[0] == 0:
                return True
            self._wake.set()
            time.sleep(0.05)
        return self.spool.pending_stats()[0] == 0

    def send_one(self, batch: SpooledBatch) -> bool:
        """One attempt; True when the spool made progress (ack, resync), False to back off."""
        r = self.connection.post(self.node, batch)
        # Delete from the spool only on the collector's own receipt for exactly this batch: a 200
        # from anything else (a wrong URL, a proxy, a captive portal) must not destroy data.
        if r.status == 200 and not _is_receipt(r.body, batch):
            self.stats.failures += 1
            self.stats.last_error = f"200 without a receipt for seq {batch.seq}: {str(r.body)[:200]}"
            log.error("collector answered 200 but not with a receipt for batch %d; keeping it", batch.seq)
            return False
        if r.status == 200:
            durable = self._durable_through(r.body, batch)
            if durable is not None:
                self.spool.ack_below(durable + 1)
            self._poll_at = time.monotonic() + self.durable_poll_s
            if r.body.get("duplicate"):
                if batch.seq <= self._stored_through:
                    self.stats.durable_polls += 1
                else:
                    self.stats.duplicates += 1
                self._stored_through = max(self._stored_through, batch.seq)
            else:
                self.stats.sent += 1
                self.stats.samples_sent += batch.n_samples
                # the collector's chain now ends at this batch (a poll it answers this way had been lost)
                self._stored_through = batch.seq
            return True
        self.stats.failures += 1
        detail = r.body.get("detail") or r.body.get("message") or r.body
        self.stats.last_error = f"{r.status} {r.body.get('error', '')}: {detail}"
        if r.status == 409 and isinstance(r.body.get("expected_seq"), int):
            return self._resync(batch, r.body["expected_seq"], str(r.body.get("error", r.body.get("code", ""))))
        if r.status == 0 or r.status >= 500:
            log.warning("collector unavailable (%s); batch %d stays spooled", self.stats.last_error, batch.seq)
        else:
            log.error("collector rejected batch %d: %s; keeping it spooled and backing off",
                      batch.seq, self.stats.last_error)
        return False

    def _durable_through(self, body: dict, batch: SpooledBatch) -> int | None:
        """The highest seq this receipt lets the spool forget: its ``durable_seq``, but not past the
        batch it is the receipt of; None when nothing is durable yet."""
        if "durable_seq" not in body:  # a collector from before the watermark: its ack meant committed
            if not self._legacy_warned:
                self._legacy_warned = True
                log.warning("collector does not report durable_seq (an older version): batches leave the "
                            "spool when committed, and a power loss of the collector can lose them")
            return batch.seq
        durable = body["durable_seq"]
        if isinstance(durable, bool) or not isinstance(durable, int):
            self.stats.durable_seq = -1    # nothing on its disk yet (null), as it says
            return None
        self.stats.durable_seq = durable   # as reported: a collector that lost synced batches reports less
        return min(durable, batch.seq)

    @property
    def stored_through(self) -> int:
        """The collector has stored every pending batch up to this seq (-1: none); the pending batches
        at or below it (``Spool.pending_stats(through=...)``) are stored but not yet durable."""
        return self._stored_through

    def _resync(self, batch: SpooledBatch, expected: int, code: str) -> bool:
        seqs = self.spool.pending_seqs()
        if code == "out_of_order" and seqs and expected < seqs[0]:
            first = self.spool.rechain(expected)
            self.stats.declared_lost += first - expected
            self._stored_through = expected - 1
            log.error("collector is missing batches %d..%d that this agent no longer holds; "
                      "declaring them lost with gap_from on batch %d", expected, first - 1, first)
            return True
        if code == "out_of_order" and seqs and seqs[0] <= expected < batch.seq and expected in seqs:
            # The collector holds every batch below ``expected`` and none from it on: it lost batches
            # it had stored but not yet synced (a power loss). Resend from there; what is below stays
            # in the spool until a receipt's durable_seq covers it. Only for an ``expected`` below the
            # batch just sent (an honest collector never names the sent seq itself: that answer would
            # resend the same batch in a loop without backing off).
            self._stored_through = expected - 1
            log.warning("collector lacks batches from %d on; resending them", expected)
            return True
        if self._held_seq != batch.seq:  # log once per stuck batch, not on every backoff round
            self._held_seq = batch.seq
            log.error("collector rejected batch %d as %s (expects seq %d) while this spool holds %s..%s: the "
                      "collector has a chain this spool did not write (a wiped or swapped spool, or a second agent "
                      "under the same node id). Every batch is kept; operator action needed.",
                      batch.seq, code, expected, seqs[0] if seqs else None, seqs[-1] if seqs else None)
        return False


def _is_receipt(body, batch: SpooledBatch) -> bool:
    """The collector's acknowledgement names the batch it stored: its seq and its SHA-256."""
    return (isinstance(body, dict) and body.get("accepted") is True and body.get("seq") == batch.seq
            and body.get("digest") == digest(batch.body))
