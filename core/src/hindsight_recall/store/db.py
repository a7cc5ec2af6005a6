"""One async connection pool (SQLAlchemy 2 + psycopg 3) plus the session set-up every connection gets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from ..errors import DatabaseError, PoolExhausted, db_message, lost_worker, redact
from ..settings import Settings
from . import embedded
from .citus import DISTRIBUTED, REFERENCE, has_citus
from .shards import Placement, ShardReads, mark_moved, moved, placement_sql, rewrite

log = logging.getLogger(__name__)

#: the tables a recall may read, whose shards :meth:`Database.reading` finds
TABLES = [*DISTRIBUTED, *REFERENCE]

#: SQLSTATEs after which the same statement may succeed on a fresh connection or a new try:
#: connection exceptions (class 08), the server shutting down or crashing (57P01-57P03), and
#: serialization failures and deadlocks (40001, 40P01); a Citus worker lost is retryable too
#: (:func:`~hindsight_recall.errors.lost_worker`).
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03"})
#: The advisory-lock key that serialises schema upgrades (and schema creation) across processes; the
#: key every release has used, so an older release starting at the same moment waits too.
MIGRATION_LOCK = "hashtext('hindsight_recall.migrate')"
#: Seconds between attempts to take :data:`MIGRATION_LOCK` while another process upgrades.
MIGRATION_LOCK_POLL = 0.2
#: libpq's TCP settings, unless the URL gives its own: a database host that vanished without closing
#: its connections (power lost, the network split) is noticed within about half a minute instead of
#: the kernel's two hours, and the requests on those connections fail over instead of hanging
TCP_DEFAULTS = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5", "keepalives_count": "3",
                "tcp_user_timeout": "30000"}


def is_retryable(exc: BaseException) -> bool:
    """True for a lost connection (to the server, or from a Citus coordinator to a worker) or a
    serialization failure/deadlock; every other error is final.

    Takes SQLAlchemy's wrapped errors and the driver's own (COPY runs on the raw connection).
    """
    import psycopg

    if moved(exc):  # read on a shard that moved: its new place is asked again
        return True
    if isinstance(exc, DBAPIError):
        orig, invalidated = exc.orig, exc.connection_invalidated
    elif isinstance(exc, psycopg.Error):
        orig, invalidated = exc, False
    else:
        return False
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state.startswith("08") or state in RETRYABLE_SQLSTATES or lost_worker(exc)
    # No SQLSTATE: the driver itself found the connection gone (closed socket, server exited).
    return invalidated or isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)


#: SQLSTATE -> what to do, for errors a caller can meet through no fault of the request.
_DATABASE_HINTS = {
    "53100": "the disk that holds the database is full: free space on it (for the embedded server, the disk "
             "of HINDSIGHT_API_EMBEDDED_DATA_DIR), then retry",
    "53200": "the database server ran out of memory: retry, or give it more memory",
    "53300": "the database server has no connection slot free: lower HINDSIGHT_API_DB_POOL_MAX_SIZE, or raise "
             "the server's max_connections",
    "25006": "the database is read-only (a standby, or default_transaction_read_only is on): point "
             "HINDSIGHT_API_DATABASE_URL at a writable primary",
    "42501": "the database role lacks a privilege this needs: grant it, or connect as the schema's owner",
    "58030": "the database server could not read or write its files (a full, read-only or failing disk): "
             "check the disk of its data directory",
}


#: what to do when a Citus worker could not be reached (its banks answer again once it runs)
_CITUS_WORKER_HINT = ("a Citus worker holding the bank could not be reached: check that every worker runs "
                      "(its banks answer again once it does)")


def database_error(what: str, exc: BaseException) -> DatabaseError:
    """A :class:`DatabaseError` for a driver error that reached a public call: the server's reason
    (first line, redacted) and what to do about it."""
    state = str(getattr(getattr(exc, "orig", exc), "sqlstate", None) or "")
    hint = _CITUS_WORKER_HINT if lost_worker(exc) else _DATABASE_HINTS.get(state)
    if hint is None and (is_retryable(exc) or state.startswith("57P")):
        hint = "the connection to PostgreSQL was lost and retrying did not help: check that the server runs"
    if hint is None:
        hint = "see the database server's log"
    return DatabaseError(f"{what} failed in the database: {db_message(exc).rstrip('.')}. {hint[0].upper()}{hint[1:]}.")


@contextlib.contextmanager
def database_errors(what: str) -> Iterator[None]:
    """Turn a driver error raised in the block into :func:`database_error`."""
    import psycopg

    try:
        yield
    except (DBAPIError, psycopg.Error) as exc:
        raise database_error(what, exc) from exc


def sqlalchemy_url(url: str) -> str:
    """Accept libpq-style URLs and pick the psycopg 3 driver."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise DatabaseError(
            f"HINDSIGHT_API_DATABASE_URL={redact(url)!r} is not a valid URL; expected "
            "postgresql://user:password@host:port/database"
        ) from None
    if parsed.get_backend_name() != "postgresql":
        raise DatabaseError(f"HINDSIGHT_API_DATABASE_URL must be a postgresql:// URL, got {parsed.drivername!r}")
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


class Database:
    """The pool, the embedded server (when used) and per-connection session statements."""

    def __init__(self, settings: Settings, session_statements: Sequence[str] = ()) -> None:
        self.settings = settings
        self.session_statements = list(session_statements)
        self.engine: AsyncEngine | None = None
        #: Unpooled connections, for schema upgrades (:meth:`maintenance`).
        self.direct: AsyncEngine | None = None
        self.embedded = settings.database_url is None
        self.url = ""
        #: the server is a Citus coordinator (the database has the ``citus`` extension)
        self.citus = False
        #: on Citus with CITUS_DIRECT_READS: where banks' shards are (recalls read them on their worker)
        self.shards: ShardReads | None = None
        #: pools on Citus workers, by (host, port)
        self._workers: dict[tuple[str, int], AsyncEngine] = {}
        self._pooled: dict[str, Any] = {}

    async def open(self) -> None:
        s = self.settings
        if self.embedded:
            try:
                self.url = await asyncio.to_thread(embedded.start, s.embedded_data_dir, s.server_settings())
            except OSError as exc:  # a read-only, full or missing place for the data dir
                raise DatabaseError(
                    f"cannot start the embedded PostgreSQL server in {embedded.resolve(s.embedded_data_dir)}: "
                    f"{exc.strerror or exc} ({exc.filename}). Set HINDSIGHT_API_EMBEDDED_DATA_DIR to a writable "
                    "directory with free space, or HINDSIGHT_API_DATABASE_URL to a PostgreSQL server."
                ) from exc
        else:
            self.url = s.database_url or ""
        # quoted so a mixed-case schema is not folded to lower case (the setting admits identifiers only);
        # JIT compiles for plans the planner thinks expensive, and for recall's short statements
        # compiling costs more than it saves. plan_cache_mode is the server's (PostgreSQL's default is
        # auto): psycopg prepares a statement from its fifth run, and the server may then keep a
        # generic plan. Planning a recall's composed statement took more than running it (2.3 against
        # 1.4 ms for a LoCoMo question); with cached plans a recall costs the database 5.7 ms of CPU
        # instead of 10.5, with the same answers. Times come back in UTC whatever the server's TimeZone
        # (the embedded server's is the machine's, often Etc/UTC): the same answer from every server,
        # and psycopg gives "UTC" Python's own timezone.utc, which is about twice as fast to load and
        # to format as a zoneinfo zone (a recall loads a couple of thousand times).
        options = (f'-c search_path="{s.database_schema}",public -c jit=off '
                   '-c TimeZone=UTC')
        if s.db_statement_timeout:
            options += f" -c statement_timeout={int(s.db_statement_timeout * 1000)}"
        url = sqlalchemy_url(self.url)
        given = make_url(url).query
        kept = s.pooled_connections()
        connect_args = {"options": options, "connect_timeout": max(int(s.db_acquire_timeout), 1),
                        **{k: v for k, v in TCP_DEFAULTS.items() if k not in given}}
        self._pooled = {"pool_size": kept, "max_overflow": s.db_pool_max_size - kept,
                        "pool_timeout": s.db_acquire_timeout or None, "pool_pre_ping": False,
                        "connect_args": connect_args}
        self.engine = create_async_engine(url, **self._pooled)
        # outside the pool: an upgrade holds a lock connection and a work connection beside the pool's
        self.direct = create_async_engine(url, poolclass=NullPool, connect_args=connect_args)
        setup = self._run_session_statements
        event.listen(self.direct.sync_engine, "connect", setup)
        event.listen(self.engine.sync_engine, "connect", setup)
        if s.db_session_setup_on_acquire and self.session_statements:
            event.listen(self.engine.sync_engine, "checkout", setup)
        try:
            async with self.engine.connect() as conn:
                self.citus = await has_citus(conn)  # asked once per process and store
        except Exception as exc:
            await self.close()
            raise DatabaseError(
                f"cannot connect to PostgreSQL: {db_message(exc)}. Check HINDSIGHT_API_DATABASE_URL "
                "(unset it to use the embedded server)."
            ) from None
        if self.citus:
            # Workers see the transaction's SET LOCAL settings (the arms' hnsw.* settings) only so.
            self.session_statements.append("SET citus.propagate_set_commands = local")
            await self.engine.dispose()  # the probing connection was set up without it
            self.shards = ShardReads() if s.citus_direct_reads else None
        if s.database_schema != "public":
            try:
                await self._create_schema(s.database_schema)
            except Exception as exc:
                await self.close()
                raise DatabaseError(
                    f"cannot create schema {s.database_schema!r}: {db_message(exc).rstrip('.')}. Create it "
                    "yourself, or grant CREATE on the database, or unset HINDSIGHT_API_DATABASE_SCHEMA."
                ) from None

    async def _create_schema(self, name: str) -> None:
        """Create DATABASE_SCHEMA, and pgvector in ``public`` so every schema sees its type."""
        from psycopg import sql  # late: only a non-default schema needs it

        from .driver import driver_connection

        # the migration lock: concurrent first starts would race on the catalog's unique names
        async with self.migration_lock(), self.connect() as conn:
            raw = await driver_connection(conn)
            # checked first: CREATE ... IF NOT EXISTS needs the privilege even when nothing is created
            if not await (await raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))).fetchone():
                await raw.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
            if not await (await raw.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).fetchone():
                # an extension lives in one schema; in the tenant's it would be invisible to the others
                await raw.execute("CREATE EXTENSION vector SCHEMA public")

    @asynccontextmanager
    async def migration_lock(self) -> AsyncIterator[None]:
        """Hold the schema lock (one upgrade at a time across processes) for the block.

        A session lock taken by polling: a start-up waiting for it holds no transaction, so it cannot
        hold up a ``CREATE INDEX CONCURRENTLY`` of the upgrade it waits for (which waits for every
        older snapshot, and would wait forever for a waiter blocked inside ``pg_advisory_lock``).
        """
        async with self.maintenance() as conn:
            while not await conn.scalar(text(f"SELECT pg_try_advisory_lock({MIGRATION_LOCK})")):
                await asyncio.sleep(MIGRATION_LOCK_POLL)
            try:
                yield
            finally:
                await conn.execute(text(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})"))

    @asynccontextmanager
    async def maintenance(self) -> AsyncIterator[AsyncConnection]:
        """An autocommit connection without statement or lock timeouts, for upgrades.

        Each statement is its own transaction. The connection is not the pool's: it is closed
        afterwards, so its session settings never reach a recall, and it needs no free pool slot.
        """
        if self.direct is None:
            raise DatabaseError("the database is not open; use 'async with Engine()' first")
        conn = await self.direct.connect()
        try:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("SET statement_timeout = 0")
            await conn.exec_driver_sql("SET lock_timeout = 0")
            yield conn
        finally:
            await asyncio.shield(conn.close())

    def _run_session_statements(self, dbapi_connection: Any, *_: Any) -> None:
        if not self.session_statements:
            return
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        for statement in self.session_statements:
            cursor.execute(statement)
        cursor.close()
        dbapi_connection.autocommit = autocommit

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A pooled connection inside a transaction that commits on success."""
        if self.engine is None:
            raise DatabaseError("the database is not open; use 'async with Engine()' first")
        async with _transaction(await self._started(self.engine)) as conn:
            yield conn

    @asynccontextmanager
    async def reading(self, bank_id: str) -> AsyncIterator[AsyncConnection]:
        """A connection for a recall's reads of one bank, as :meth:`connect` gives: on Citus, on the
        worker that holds the bank's shards, its statements reading them there (:mod:`.shards`)."""
        placement = await self._placement(bank_id) if self.shards is not None else None
        conn = await self._on_worker(placement) if placement is not None else None
        if conn is None:
            async with self.connect() as conn:
                yield conn
            return
        conn.info["shards"] = placement
        try:
            async with _transaction(conn):
                yield conn
        except Exception as exc:
            if self.shards is not None and getattr(getattr(exc, "orig", exc), "sqlstate", None) == "42P01":
                self.shards.gone(bank_id)  # its shard moved away: asked again at the next try
                mark_moved(exc)
            raise

    async def _on_worker(self, placement: Placement) -> AsyncConnection | None:
        """A connection on the placement's worker; ``None`` when it cannot be reached from here."""
        assert self.shards is not None
        try:
            return await self._started(self._worker(placement))
        except (DBAPIError, OSError) as exc:
            self.shards.unreachable(placement, exc)
            return None

    async def _placement(self, bank_id: str) -> Placement | None:
        assert self.shards is not None

        async def ask() -> Any:
            async with self.connect() as conn:
                return (await conn.execute(placement_sql(), {"bank": bank_id, "tables": TABLES})).all()

        return await self.shards.placement(bank_id, ask)

    def _worker(self, placement: Placement) -> AsyncEngine:
        """The pool on the placement's worker: the coordinator's URL and settings, its host and port."""
        key = (placement.host, placement.port)
        engine = self._workers.get(key)
        if engine is None:
            url = make_url(sqlalchemy_url(self.url)).difference_update_query(["host", "hostaddr", "port"])
            engine = create_async_engine(url.set(host=placement.host, port=placement.port), **self._pooled)
            event.listen(engine.sync_engine, "connect", self._run_session_statements)
            if self.settings.db_session_setup_on_acquire and self.session_statements:
                event.listen(engine.sync_engine, "checkout", self._run_session_statements)
            event.listen(engine.sync_engine, "before_cursor_execute", _on_shards, retval=True)
            self._workers[key] = engine
        return engine

    async def _started(self, engine: AsyncEngine) -> AsyncConnection:
        conn = engine.connect()
        try:
            await conn.start()
        except PoolTimeout:
            s = self.settings
            raise PoolExhausted(
                f"no database connection came free within {s.db_acquire_timeout:g} s: all "
                f"{s.db_pool_max_size} are in use (raise HINDSIGHT_API_DB_POOL_MAX_SIZE or "
                "HINDSIGHT_API_DB_ACQUIRE_TIMEOUT, or lower HINDSIGHT_API_RECALL_MAX_CONCURRENT)"
            ) from None
        return conn

    async def recover(self) -> bool:
        """After a lost connection: drop the pooled connections and restart the embedded server if it
        died (only a server this engine started). True when the server was restarted."""
        if self.engine is None:
            return False
        restarted = False
        if self.embedded and self.url:
            try:
                restarted = await asyncio.to_thread(
                    embedded.ensure_running, self.settings.embedded_data_dir, self.settings.server_settings()
                )
            except OSError as exc:
                raise DatabaseError(f"cannot restart the embedded PostgreSQL server: {exc}") from exc
        await self.engine.dispose()  # every pooled connection shares the fate of the one that broke
        for worker in self._workers.values():
            await worker.dispose()
        return restarted

    async def vacuum_analyze(self, tables: Sequence[str]) -> None:
        """``VACUUM (ANALYZE)`` the tables; it cannot run inside a transaction, so autocommit."""
        if self.engine is None:
            raise DatabaseError("the database is not open; use 'async with Engine()' first")
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            for table in tables:
                await conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")

    def limited(self, connections: int, lend: AsyncConnection | None = None,
                bank_id: str | None = None) -> LimitedConnections:
        """A view that lets one recall hold at most ``connections`` connections at once.

        :param connections: RECALL_CONNECTION_BUDGET.
        :param lend: a connection the recall already holds; it is handed out whenever it is free.
        :param bank_id: the recall's bank: connections come from :meth:`reading` for it.
        """
        return LimitedConnections(self, connections, lend, bank_id)

    async def close(self) -> None:
        for worker in self._workers.values():
            await worker.dispose()
        self._workers.clear()
        if self.direct is not None:
            await self.direct.dispose()
            self.direct = None
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None
        if self.embedded and self.url:
            try:
                await asyncio.to_thread(embedded.stop, self.settings.embedded_data_dir)
            except OSError as exc:  # the lock file cannot be written: the server's last user stops it
                log.warning("could not release the embedded server in %s: %s", self.settings.embedded_data_dir, exc)
            self.url = ""


class LimitedConnections:
    """Hands out connections of a :class:`Database`, at most ``n`` at a time (RECALL_CONNECTION_BUDGET).

    A recall holds one connection from its start (the bank lookup) to its end; lent out whenever
    it is free, it spares the checkout, ``BEGIN`` and ``COMMIT`` of a stage that runs alone (the
    keyword arm while the query is embedded, the context stage, the final row fetch). Statements on
    it run in the recall's transaction: ``hnsw.*`` settings are set by each arm that searches the
    index, so none relies on another's. After an error on it (a timeout cancels a statement and
    aborts the transaction), it is not lent again.
    """

    def __init__(self, db: Database, n: int, lend: AsyncConnection | None = None, bank_id: str | None = None) -> None:
        self.db = db
        self._bank_id = bank_id
        self._slots = asyncio.Semaphore(n)
        self._lend = lend
        self._lent = False
        #: Seconds spent waiting for a slot or a pooled connection, summed (a trace diagnostic).
        self.waited = 0.0
        #: Connections taken from the pool (the lent one not counted), a trace diagnostic.
        self.checkouts = 0

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        started = time.perf_counter()
        async with self._slots:
            if self._lend is not None and not self._lent:
                self._lent = True
                self.waited += time.perf_counter() - started
                try:
                    yield self._lend
                except BaseException:
                    self._lend = None
                    raise
                finally:
                    self._lent = False
                return
            async with (self.db.reading(self._bank_id) if self._bank_id is not None else self.db.connect()) as conn:
                self.checkouts += 1
                self.waited += time.perf_counter() - started
                yield conn


@asynccontextmanager
async def _transaction(conn: AsyncConnection) -> AsyncIterator[AsyncConnection]:
    """A started connection inside a transaction that commits on success, back to its pool at the end
    (shielded, so that a cancelled recall still returns it)."""
    try:
        async with conn.begin():
            yield conn
    finally:
        await asyncio.shield(conn.close())


def _on_shards(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> Any:
    """A worker connection's statements read the shards of the bank it was taken for (:mod:`.shards`)."""
    placement = conn.info.get("shards")
    return (rewrite(statement, placement) if placement is not None else statement), parameters
