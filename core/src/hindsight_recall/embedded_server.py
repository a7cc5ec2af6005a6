"""The embedded PostgreSQL server as a command sees it: started ahead of the engine, its status, stopped.

Apart from the engine on purpose: importing this imports neither the engine nor SQLAlchemy, so a command
starts the server on a thread while the engine's modules import (each takes about 0.7 s in a new
process, and the server runs in processes of its own).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from .settings import Settings
from .store import embedded
from .store.embedded import Status as Status  # re-exported: what :func:`status` answers


def start_ahead(settings: Settings) -> None:
    """Start (or join) the server the engine of ``settings`` will use, on a thread, as a user of this process
    released at exit (the last user in any process stops it); the engine's own start joins the same server
    and reports whatever went wrong here."""
    threading.Thread(target=_start, args=(settings,), name="hindsight-db-start", daemon=True).start()


def join(data_dir: Path | None) -> str:
    """Start (or join) the server of ``data_dir`` as a user of this process, for processes of one's own to
    connect to; its libpq URL. :func:`leave` ends the use."""
    return embedded.start(data_dir)


def leave(data_dir: Path | None) -> None:
    """Release this process's use of the server of ``data_dir``; the last user in any process stops it."""
    embedded.stop(data_dir)


def _start(settings: Settings) -> None:
    with contextlib.suppress(Exception):  # the engine's start reports what went wrong
        embedded.start(settings.embedded_data_dir, settings.server_settings())


def data_dir(given: Path | None) -> Path:
    """The server's absolute data directory (``None``: the per-user default)."""
    return embedded.resolve(given)


def status(data_dir: Path | None) -> Status | None:
    """The running server of ``data_dir`` with the processes using it, or ``None``."""
    return embedded.status(data_dir)


def stop(data_dir: Path | None) -> bool:
    """Stop the server of ``data_dir`` now, whoever uses it (open sessions are disconnected); False if none ran."""
    return embedded.stop_server(data_dir)
