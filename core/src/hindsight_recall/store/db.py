"""One async connection pool (SQLAlchemy 2 + psycopg 3) plus the session set-up every connection gets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..errors import DatabaseError, PoolExhausted
from ..settings import Settings, redact
from . import embedded

#: SQLSTATEs after which the same statement may succeed on a fresh connection or a new try:
#: connection exceptions (class 08), the server shutting down or crashing (57P01-57P03), and
#: serialization failures and deadlocks (40001, 40P01).
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03"})


def is_retryable(exc: BaseException) -> bool:
    """True for a lost connection or a serialization failure/deadlock; every other error is final.

    Takes SQLAlchemy's wrapped errors and the driver's own (COPY runs on the raw connection).
    """
    import psycopg

    if isinstance(exc, DBAPIError):
        orig, invalidated = exc.orig, exc.connection_invalidated
    elif isinstance(exc, psycopg.Error):
        orig, invalidated = exc, False
    else:
        return False
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state.startswith("08") or state in RETRYABLE_SQLSTATES
    # No SQLSTATE: the driver itself found the connection gone (closed socket, server exited).
    return invalidated or isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)


def db_message(exc: BaseException) -> str:
    """The first line of the driver's message (not SQLAlchemy's SQL echo), credentials redacted."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    return redact(text.splitlines()[0]) if text else type(orig).__name__


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
        self.embedded = settings.database_url is None
        self.url = ""
        #: the server is a Citus coordinator (the database has the ``citus`` extension)
        self.citus = False

    async def open(self) -> None:
        s = self.settings
        if self.embedded:
            self.url = await asyncio.to_thread(embedded.start, s.embedded_data_dir, s.server_settings())
        else:
            self.url = s.database_url or ""
        # quoted so a mixed-case schema is not folded to lower case (the setting admits identifiers only);
        # JIT compiles for plans the planner thinks expensive, and for recall's short statements
        # compiling costs more than it saves.
        options = f'-c search_path="{s.database_schema}",public -c plan_cache_mode=force_custom_plan -c jit=off'
        if s.db_statement_timeout:
            options += f" -c statement_timeout={int(s.db_statement_timeout * 1000)}"
        self.engine = create_async_engine(
            sqlalchemy_url(self.url),
            pool_size=max(s.db_pool_min_size, 1),
            max_overflow=s.db_pool_max_size - max(s.db_pool_min_size, 1),
            pool_timeout=s.db_acquire_timeout or None,
            pool_pre_ping=False,
            connect_args={"options": options, "connect_timeout": max(int(s.db_acquire_timeout), 1)},
        )
        setup = self._run_session_statements
        event.listen(self.engine.sync_engine, "connect", setup)
        if s.db_session_setup_on_acquire and self.session_statements:
            event.listen(self.engine.sync_engine, "checkout", setup)
        try:
            async with self.engine.connect() as conn:
                self.citus = bool(await conn.scalar(text(
                    "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")))
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

        from ._bincopy import driver_connection

        async with self.connect() as conn:
            # the migration lock: concurrent first starts would race on the catalog's unique names
            await conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('hindsight_recall.migrate'))")
            raw = await driver_connection(conn)
            # checked first: CREATE ... IF NOT EXISTS needs the privilege even when nothing is created
            if not await (await raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))).fetchone():
                await raw.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
            if not await (await raw.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).fetchone():
                # an extension lives in one schema; in the tenant's it would be invisible to the others
                await raw.execute("CREATE EXTENSION vector SCHEMA public")

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
        conn = self.engine.connect()
        try:
            await conn.start()
        except PoolTimeout:
            s = self.settings
            raise PoolExhausted(
                f"no database connection came free within {s.db_acquire_timeout:g} s: all "
                f"{s.db_pool_max_size} are in use (raise HINDSIGHT_API_DB_POOL_MAX_SIZE or "
                "HINDSIGHT_API_DB_ACQUIRE_TIMEOUT, or lower HINDSIGHT_API_RECALL_MAX_CONCURRENT)"
            ) from None
        try:
            async with conn.begin():
                yield conn
        finally:
            await asyncio.shield(conn.close())

    async def recover(self) -> bool:
        """After a lost connection: drop the pooled connections and restart the embedded server if it
        died (only a server this engine started). True when the server was restarted."""
        if self.engine is None:
            return False
        restarted = False
        if self.embedded and self.url:
            restarted = await asyncio.to_thread(
                embedded.ensure_running, self.settings.embedded_data_dir, self.settings.server_settings()
            )
        await self.engine.dispose()  # every pooled connection shares the fate of the one that broke
        return restarted

    async def vacuum_analyze(self, tables: Sequence[str]) -> None:
        """``VACUUM (ANALYZE)`` the tables; it cannot run inside a transaction, so autocommit."""
        if self.engine is None:
            raise DatabaseError("the database is not open; use 'async with Engine()' first")
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            for table in tables:
                await conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")

    def limited(self, connections: int, lend: AsyncConnection | None = None) -> LimitedConnections:
        """A view that lets one recall hold at most ``connections`` connections at once.

        :param connections: RECALL_CONNECTION_BUDGET.
        :param lend: a connection the recall already holds; it is handed out whenever it is free.
        """
        return LimitedConnections(self, connections, lend)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None
        if self.embedded and self.url:
            await asyncio.to_thread(embedded.stop, self.settings.embedded_data_dir)
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

    def __init__(self, db: Database, n: int, lend: AsyncConnection | None = None) -> None:
        self.db = db
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
            async with self.db.connect() as conn:
                self.checkouts += 1
                self.waited += time.perf_counter() - started
                yield conn
