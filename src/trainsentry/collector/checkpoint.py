"""WAL checkpoints on their own thread and connection, off the ingest path.

With SQLite's automatic checkpoint, the commit that crosses 1,000 WAL pages copies them into the
database file and fsyncs it, holding the event loop (and every waiting agent) for 10-80 ms on
the CI machine. Here the writer turns automatic checkpoints off and pokes this thread after each
commit; the thread runs a PASSIVE checkpoint (it never blocks the writer) at most every
``min_interval_s``. The GIL is released inside SQLite, so the loop keeps ingesting while the
copy and fsync run. A checkpoint only moves committed pages into the main file.

The same thread keeps the **durable watermark**: per node, the last batch seq committed
(``committed``, set by the writer after each COMMIT through :meth:`Checkpointer.poke`) and the last
known to be on disk (``durable``), which every acknowledgement reports (``durable_seq``; the agent
keeps a batch in its spool until it is covered). With ``synchronous=NORMAL`` a COMMIT writes its
frames to the WAL without fsync, and SQLite fsyncs the WAL only before a checkpoint that has frames
to copy (not when readers hold the copy back) and the database file only after a checkpoint that
copied everything (sqlite.org/pragma.html#pragma_synchronous, ``walCheckpoint`` in wal.c): that
cannot tell which commits are on disk. So each round begins with an explicit step: copy
``committed``, fdatasync the WAL, then raise ``durable`` to the copy. Every commit in the copy
returned before the fdatasync began, so its frames are in the file it flushes; frames the WAL has
since dropped were copied into the database file by a checkpoint that completed, which SQLite
syncs before it starts the WAL over. The first round (right after opening) covers what an earlier
process committed and did not sync (it was killed). With ``synchronous=FULL`` every COMMIT fsyncs
the WAL, so ``poke`` raises ``durable`` with ``committed``. The watermark may lag (a failed sync is
retried next round), never lead.

The WAL stays bounded. SQLite starts writing the WAL from its beginning again only after a
checkpoint has copied every frame; under continuous ingest a PASSIVE checkpoint never catches up
(new frames arrive while it copies), so the file grew without end (196 MB after 2,000 benchmark
batches). When the WAL holds more than ``max_wal_pages`` frames after a PASSIVE checkpoint, the
thread runs one RESTART checkpoint: it copies the rest with writers held off and makes the next
commit start the WAL over, once per ``max_wal_pages`` of traffic. While a reader holds an old
snapshot the RESTART gives up after ``restart_wait_s`` (0.25 s) and is not tried again for
``restart_backoff_s`` (5 s), so a long query holds ingest up at most 0.25 s in every 5 s.
``journal_size_limit`` then truncates the file back to that size.

How long the writer is held off by a RESTART (docs/performance.md, "Collector ingest"):

* The writer waits in :meth:`Checkpointer.poke`, between its transactions, and goes on the moment
  the RESTART is over. Left to SQLite, the two connections met through busy handlers that poll with
  sleeps of 1, 2, 5, 10, 15, 20 ms...: the RESTART waited for a gap between the writer's
  transactions, then the writer slept on in its BEGIN after the RESTART had finished (33 or 53 ms
  a time in the benchmark). Now the thread asks (``_restart_due``), the writer parks at its next
  ``poke`` and the RESTART runs at once. A writer that does not come (no ingest) is waited for at
  most ``park_wait_s``, and a parked writer waits at most ``park_timeout_s``: SQLite's locks still
  decide who writes, the handoff only replaces the polling.
* A PASSIVE checkpoint syncs the database file only when it has copied the whole WAL, which under
  continuous ingest it never has: by the time of a RESTART the file holds up to ``max_wal_pages``
  of copied, unsynced pages, and the RESTART's fdatasync of them (~30 ms here) held the writer. The
  thread syncs the file first, while the writer still runs, so the RESTART syncs only what it copies.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from .schema import connect

_log = logging.getLogger(__name__)

_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


class Checkpointer:
    def __init__(self, path: str | Path, synchronous: str = "normal", min_interval_s: float = 0.25,
                 max_wal_pages: int = 16384):
        self.path = Path(path)
        self.max_wal_pages = max_wal_pages     # 64 MiB at 4 KiB pages
        self.restart_wait_s = 0.25
        self.restart_backoff_s = 5.0           # after a RESTART that a reader held up
        self.restarts = 0
        self.restarts_given_up = 0
        self.synchronous = synchronous
        self.min_interval_s = min_interval_s
        self.checkpoints = 0
        self.errors = 0
        self._wake = threading.Event()
        self._stopping = False
        self._real_path = os.path.realpath(self.path)
        self._wal_path = self._real_path + "-wal"   # SQLite names it after the resolved database path
        self._wal_dir_synced = False
        # The durable watermark (module docstring): node id -> batch seq. The writer sets committed
        # (and, with FULL, durable); this thread raises durable, only ever to seqs it saw committed.
        self.committed: dict[int, int] = {}
        self.durable: dict[int, int] = {}
        self.durable_steps = 0
        self._durable_lock = threading.Lock()   # FULL: poke and a round both raise durable (never lower it)
        self._sync_logged_at = -1e9
        # The RESTART handoff (module docstring). poke reads _restart_due without the lock: a stale
        # False costs one more commit before the writer parks.
        self.park_wait_s = 0.1
        self.park_timeout_s = 2.0
        self.writer_parked_s = 0.0             # time the writer spent parked for RESTARTs, in all
        self._handoff = threading.Condition()
        self._restart_due = False
        self._writer_parked = False
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self._thread.start()

    def poke(self, node_id: int | None = None, seq: int | None = None) -> None:
        """A commit happened (of batch ``seq`` of ``node_id``, when it stored one): checkpoint and sync
        soon. The writer calls it between transactions; while a RESTART is due it waits here until
        the RESTART is over (module docstring)."""
        if node_id is not None:
            self.committed[node_id] = seq
            if self.synchronous == "full":  # this COMMIT fsynced the WAL, and with it every earlier one
                with self._durable_lock:
                    if self.durable.get(node_id, -1) < seq:
                        self.durable[node_id] = seq
        if not self._wake.is_set():  # set() takes the event's lock (~4 µs); the thread clears it every round only
            self._wake.set()
        if self._restart_due:
            self._park_writer()

    def _park_writer(self) -> None:
        t = time.monotonic()
        with self._handoff:
            if not self._restart_due:
                return
            self._writer_parked = True
            self._handoff.notify_all()
            self._handoff.wait_for(lambda: not self._restart_due, timeout=self.park_timeout_s)
            self._writer_parked = False
        self.writer_parked_s += time.monotonic() - t

    def _restart(self, conn) -> bool:
        """One RESTART checkpoint, the database file synced first and the writer parked (or absent).
        True when it started the WAL over, False when a reader held it up past restart_wait_s."""
        self._sync_database_file()
        with self._handoff:
            self._restart_due = True
            self._handoff.wait_for(lambda: self._writer_parked or self._stopping, timeout=self.park_wait_s)
        try:
            return not conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()[0][0]
        finally:
            with self._handoff:
                self._restart_due = False
                self._handoff.notify_all()

    def _make_durable(self) -> bool:
        """Raise ``durable`` to everything committed before this call (module docstring); False when
        the WAL could not be synced (the watermark stays where it was)."""
        committed = self.committed.copy()
        try:
            self._sync_wal()
        except OSError as e:
            # every agent keeps its whole spool while this fails: say so (once a minute), not only count it
            self.errors += 1
            now = time.monotonic()
            if now - self._sync_logged_at >= 60.0:
                self._sync_logged_at = now
                _log.error("cannot fsync the WAL %s (%s; %d checkpoint-thread errors so far): durable_seq does "
                           "not advance and agents keep every batch", self._wal_path, e, self.errors)
            return False
        durable = self.durable
        with self._durable_lock:
            for node_id, seq in committed.items():
                if durable.get(node_id, -1) < seq:
                    durable[node_id] = seq
        self.durable_steps += 1
        return True

    def _sync_wal(self) -> None:
        """fdatasync the WAL file (and, the first time, its directory, so the file itself survives).

        Through a descriptor of our own, which :meth:`_sync_database_file` must not use for the
        database file: SQLite takes its POSIX locks on the database and ``-shm`` files, never on the
        WAL, so closing our descriptor of the WAL drops no lock of SQLite's.
        """
        fd = os.open(self._wal_path, os.O_RDONLY)
        try:
            _fdatasync(fd)
        finally:
            os.close(fd)
        if not self._wal_dir_synced:
            fd = os.open(os.path.dirname(self._wal_path), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._wal_dir_synced = True

    def _sync_database_file(self) -> bool:
        """fdatasync the database file through a descriptor SQLite holds open (Linux: /proc/self/fd).

        Never through one of our own: closing any descriptor of the file drops every POSIX lock the
        process holds on it, SQLite's included, and another process could then take the database
        as unused and checkpoint and delete the WAL under us (sqlite.org/howtocorrupt.html, "POSIX
        advisory locks canceled by a separate thread doing close()"). A descriptor closed and
        reused between readlink and fdatasync syncs some other file or fails: harmless either way.
        False when none was found (other systems): the RESTART then syncs the file itself.
        """
        try:
            fds = os.listdir("/proc/self/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == self._real_path:
                    os.fdatasync(int(fd))
                    return True
            except (OSError, ValueError):
                continue
        return False

    def _run(self) -> None:
        conn = connect(self.path, self.synchronous)
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA journal_size_limit={self.max_wal_pages * page}")
        # A RESTART checkpoint holds writers off while it waits for readers (a long dashboard query):
        # give up after this long and back off (restart_backoff_s), so a reader never stalls ingest for long
        conn.execute(f"PRAGMA busy_timeout={int(self.restart_wait_s * 1000)}")
        retry_at = 0.0
        try:
            while True:
                self._wake.wait()
                if self._stopping:
                    break
                self._wake.clear()
                if not self._make_durable():
                    self._wake.set()  # retried next round, commits or not: acks wait for it
                try:
                    # fetchall: a statement left unfinished would hold a read snapshot and pin the WAL
                    _, log, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
                    self.checkpoints += 1
                    # `log` counts every frame since the WAL last started over: above the bound, the
                    # writer never found the log fully copied at the start of a transaction (it
                    # keeps appending while PASSIVE copies), so make it
                    if log > self.max_wal_pages and time.monotonic() >= retry_at:
                        restarted = self._restart(conn)
                        self.restarts += restarted
                        self.restarts_given_up += not restarted
                        retry_at = 0.0 if restarted else time.monotonic() + self.restart_backoff_s
                except Exception:  # a busy or failing checkpoint is retried on the next poke
                    self.errors += 1
                time.sleep(self.min_interval_s)
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the thread (the last WAL pages are checkpointed when the writer connection closes)."""
        self._stopping = True
        self._wake.set()
        with self._handoff:
            self._handoff.notify_all()
        self._thread.join(timeout=30)
