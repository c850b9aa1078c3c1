"""WAL checkpoints on their own thread and connection, off the ingest path.

With SQLite's automatic checkpoint, the commit that crosses 1,000 WAL pages copies them into the
database file and fsyncs it, holding the event loop (and every waiting agent) for 10-80 ms on
the CI machine. Here the writer turns automatic checkpoints off and pokes this thread after each
commit; the thread runs a PASSIVE checkpoint (it never blocks the writer) at most every
``min_interval_s``. The GIL is released inside SQLite, so the loop keeps ingesting while the
copy and fsync run. Durability is unchanged: a batch is in the WAL before it is acknowledged,
and the checkpoint only moves committed pages into the main file.

The WAL stays bounded. SQLite starts writing the WAL from its beginning again only after a
checkpoint has copied every frame; under continuous ingest a PASSIVE checkpoint never catches up
(new frames arrive while it copies), so the file grew without end (196 MB after 2,000 benchmark
batches). When the WAL holds more than ``max_wal_pages`` frames after a PASSIVE checkpoint, the
thread runs one RESTART checkpoint: it waits for the writer's transaction
to end, copies the rest, and makes the next commit start the WAL over; the writer waits for it
(busy_timeout) once per ``max_wal_pages`` of traffic. While a reader holds an old snapshot the
RESTART gives up after ``restart_wait_s`` (0.25 s) and is not tried again for
``restart_backoff_s`` (5 s), so a long query holds ingest up at most 0.25 s in every 5 s. ``journal_size_limit`` then truncates the
file back to that size.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .schema import connect


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
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """A commit happened: checkpoint soon."""
        self._wake.set()

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
                try:
                    # fetchall: a statement left unfinished would hold a read snapshot and pin the WAL
                    _, log, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
                    self.checkpoints += 1
                    # `log` counts every frame since the WAL last started over: above the bound, the
                    # writer never found the log fully copied at the start of a transaction (it
                    # keeps appending while PASSIVE copies), so make it
                    if log > self.max_wal_pages and time.monotonic() >= retry_at:
                        busy = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()[0][0]
                        self.restarts += not busy
                        self.restarts_given_up += bool(busy)
                        retry_at = time.monotonic() + self.restart_backoff_s if busy else 0.0
                except Exception:  # a busy or failing checkpoint is retried on the next poke
                    self.errors += 1
                time.sleep(self.min_interval_s)
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the thread (the last WAL pages are checkpointed when the writer connection closes)."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=30)
