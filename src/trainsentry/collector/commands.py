"""``trainsentry serve``, ``enroll`` and ``enroll-inspector``: the collector's commands (typer only at top level)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

DEFAULT_DB = "trainsentry.db"
DEFAULT_PORT = 8470


def serve_cmd(
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="SQLite database (created and migrated if needed)"),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on"),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="TCP port (0: pick a free one and print it)"),
    synchronous: str = typer.Option("normal", "--sync",
                                    help="normal: committed batches survive a server crash/SIGKILL and are "
                                         "fsynced within ~0.25 s (acks report durable_seq); "
                                         "full: one fsync per batch, every ack durable at once"),
    max_batch_bytes: int = typer.Option(4 * 1024 * 1024, "--max-batch-bytes", help="Refuse larger bodies (413)"),
    log_level: str = typer.Option("warning", "--log-level"),
) -> None:
    """Run the collector: accept signed batches from enrolled nodes and serve the read API."""
    from .server import run
    run(db, host, port, synchronous=synchronous, max_batch_bytes=max_batch_bytes, log_level=log_level)


def enroll_cmd(
    node: str = typer.Argument(..., help="Node name, as the agent sends it in X-TS-Node"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="Collector database"),
    key_out: Path | None = typer.Option(None, "--key-out", help="Write the hex key here (mode 0600) instead of stdout"),
    rotate: bool = typer.Option(False, "--rotate", help="Replace the key of an already enrolled node"),
) -> None:
    """Create a node's HMAC key (print it, or write it to --key-out) so its agent can send batches."""
    from .store import EnrollError, Store
    store = Store(db)
    try:
        key = store.enroll(node, rotate=rotate)
    except EnrollError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
    if key_out is None:
        typer.echo(key)
        return
    _write_secret(key_out, key)
    print(f"{'rotated' if rotate else 'enrolled'} {node}; key written to {key_out}", file=sys.stderr)


def _write_secret(path: Path, secret: str) -> None:
    """``secret`` in ``path``, created with mode 0600 (never readable by others, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")


def enroll_inspector_cmd(
    name: str = typer.Argument(..., help="Inspector name (who this token belongs to)"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="Collector database"),
    token_out: Path | None = typer.Option(None, "--token-out", help="Write the token here (mode 0600) instead of stdout"),
    rotate: bool = typer.Option(False, "--rotate", help="Replace the token of an existing inspector (ends its sessions)"),
) -> None:
    """Create an inspector's token for the dashboard and read API (node keys cannot read)."""
    from .auth import AuthError, enroll_inspector_in
    try:
        token = enroll_inspector_in(db, name, rotate=rotate)
    except AuthError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if token_out is None:
        typer.echo(token)
        return
    _write_secret(token_out, token)
    print(f"inspector {name}: token written to {token_out}", file=sys.stderr)


COMMANDS = [serve_cmd, enroll_cmd, enroll_inspector_cmd]
