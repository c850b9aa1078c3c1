"""WAL checkpoints on their own thread and connection, off the ingest path.

With SQLite's automatic checkpoint, the commit that crosses 1,000 WAL pages copies them into the
database file and fsyncs it, holding the event loop (and every waiting agent) for 10-80 ms on
the CI machine. Here the writer turns automatic checkpoints off and pokes this thread after each
commit; the thread runs a PASSIVE checkpoint (it never blocks the writer) at most every
``min_interval_s``. The GIL is released inside SQLite, so the loop keeps ingesting while the
copy and fsync run. Durability is unchanged: a batch is in the WAL before it is acknowledged,
and the checkpoint only moves committed pages into the main file.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .schema import connect


class Checkpointer:
    def __init__(self, path: str | Path, synchronous: str = "normal", min_interval_s: float = 0.25):
        self.path = Path(path)
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
        try:
            while True:
                self._wake.wait()
                if self._stopping:
                    break
                self._wake.clear()
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
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
