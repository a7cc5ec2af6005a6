"""Errors raised by hindsight-recall. Every message tells the reader how to fix the problem."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

#: the prefix of every setting's environment variable
PREFIX = "HINDSIGHT_API_"


class RecallError(Exception):
    """Base class of every error hindsight-recall raises on purpose."""

    #: HTTP-style status the error maps to at an API edge.
    status: int = 500


class ConfigError(RecallError):
    """A setting has a value that cannot work; the message names the variable."""


class MissingSetting(ConfigError):
    """A setting that the selected plugin needs is unset."""

    def __init__(self, variable: str, why: str = "") -> None:
        hint = f" ({why})" if why else ""
        super().__init__(f"{variable} is not set{hint}. Set it in the environment or in a .env file.")
        self.variable = variable


class PluginLoadError(RecallError):
    """A plugin failed to import or to register."""


class BackendNotFound(ConfigError):
    """The setting selects a plugin name that is not installed (or failed to load)."""

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        variable: str,
        installed: list[str],
        install_hint: str | None,
        failure: str | None = None,
    ) -> None:
        choices = ", ".join(sorted(installed)) or "none"
        lines = [f"{variable}={name!r}: no {kind} plugin named {name!r} is installed."]
        if failure:
            lines.append(f"The plugin {name!r} failed to load: {failure}")
        lines.append(f"Installed choices: {choices}.")
        if install_hint:
            lines.append(f"To install it: {install_hint}")
        super().__init__("\n".join(lines))
        self.kind, self.name, self.variable, self.installed = kind, name, variable, installed


class InvalidRequest(RecallError):
    """A recall or retain request is malformed; the message names the field and why."""

    status = 422

    def __init__(self, field: str, why: str, *, status: int = 422) -> None:
        super().__init__(f"{field}: {why}")
        self.field, self.why, self.status = field, why, status


class QueryTooLong(InvalidRequest):
    """The query has more tokens than RECALL_MAX_QUERY_TOKENS allows."""

    def __init__(self, actual: int, allowed: int) -> None:
        super().__init__(
            "query",
            f"the query has {actual} tokens but at most {allowed} are allowed "
            "(HINDSIGHT_API_RECALL_MAX_QUERY_TOKENS)",
            status=400,
        )


class BankNotFound(InvalidRequest):
    """The request names a bank that does not exist."""

    def __init__(self, bank_id: str) -> None:
        super().__init__("bank_id", f"bank {bank_id!r} does not exist", status=404)
        self.bank_id = bank_id

    def __str__(self) -> str:
        return f"bank {self.bank_id!r} does not exist"


class DocumentChanged(InvalidRequest):
    """A document an append continues changed between reading where it ends and writing after it."""

    code = "conflict"

    def __init__(self, document_id: str, expected: int, found: int) -> None:
        super().__init__("document_id", f"document {document_id!r} held {found} memories, not the {expected} the "
                                        "append was numbered after (another write changed it): retry", status=409)
        self.document_id = document_id


class MemoryNotFound(InvalidRequest):
    """The request names a memory the bank has neither stored nor invalidated."""

    def __init__(self, bank_id: str, memory_id: str) -> None:
        super().__init__("memory_id", f"Memory unit '{memory_id}' not found in bank {bank_id!r}", status=404)
        self.bank_id, self.memory_id = bank_id, memory_id

    def __str__(self) -> str:
        return self.why


class OperationIdInUse(InvalidRequest):
    """A client-chosen operation id already names another bank's operation, or another type of operation."""

    code = "operation_id_in_use"

    def __init__(self, operation_id: object) -> None:
        super().__init__("operation_id", f"{operation_id} is already in use", status=409)

    def __str__(self) -> str:
        return f"operation_id {self.why}"


class RetainError(RecallError):
    """A memory to retain is invalid; nothing of the batch was written."""

    status = 422

    def __init__(self, line: int | None, field: str, why: str) -> None:
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{field}: {why}")
        self.line, self.field, self.why = line, field, why


class DatabaseError(RecallError):
    """The database is unreachable or misconfigured."""

    status = 503


class PoolExhausted(DatabaseError):
    """No pooled connection became free within DB_ACQUIRE_TIMEOUT."""


class RecallTimeout(RecallError):
    """A database statement timed out."""

    status = 504


class RerankerError(RecallError):
    """A reranker failed to score a batch."""


class RerankerHTTPError(RerankerError):
    """A remote reranker answered with an error status or a malformed body."""


def describe_error(exc: BaseException) -> str | None:
    """The one-line message for an error a user can fix, or ``None`` for a defect (keep its traceback)."""
    from pydantic import ValidationError
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, RecallError):
        message = str(exc)
    elif isinstance(exc, ValidationError):
        message = describe_validation_error(exc)
    elif isinstance(exc, UnicodeError):
        message = f"not valid Unicode/UTF-8 text: {exc}"
    elif isinstance(exc, PoolTimeout):
        message = "no database connection came free in time (HINDSIGHT_API_DB_POOL_MAX_SIZE, DB_ACQUIRE_TIMEOUT)"
    elif isinstance(exc, DBAPIError):
        message = f"database error: {db_message(exc)}"
    elif isinstance(exc, OSError) and exc.strerror:
        message = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
    else:
        return None
    return redact(message)


# scheme://user:password@ and key=value conninfo passwords.
_URL_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)(?P<secret>[^\s/?#]*)(?=@[^@\s/?#]*(?:[/?#\s]|$))"
)
_CONNINFO_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the password of every database URL (and ``password=...`` pair) replaced by ``***``."""
    text = _URL_PASSWORD.sub(lambda m: m["head"] + "***" if m["secret"] else m["head"], text)
    return _CONNINFO_PASSWORD.sub(lambda m: m["head"] + "***", text)


def describe_validation_error(exc: ValidationError, prefix: str = PREFIX) -> str:
    """One line per invalid field, naming its environment variable.

    :param exc: the validation error.
    :param prefix: the settings class's environment prefix.
    """
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "settings"
        variable = f"{prefix}{field.upper()}" if err["loc"] else "settings"
        # a check across fields gets every given value as its input, API keys among them: not echoed
        got = f" (got {err.get('input')!r})" if err["loc"] else ""
        lines.append(redact(f"{variable}: {err['msg']}{got}"))
    return "Invalid configuration:\n" + "\n".join(lines)


def db_message(exc: BaseException) -> str:
    """The first line of the driver's message (not SQLAlchemy's SQL echo), credentials redacted."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    return redact(text.splitlines()[0]) if text else type(orig).__name__


#: What a Citus coordinator says when a worker it needed is gone but gives no connection SQLSTATE (08):
#: internal errors (XX000) when the transaction's connection to the worker failed, no placement took a
#: COPY, or a commit failed on the shard's node, and an I/O error (58030) when a COPY broke off.
_LOST_WORKER = re.compile(
    r"failure on connection marked as essential: \S+:\d+$|could not connect to any active placements$"
    r"|could not commit transaction for shard \d+ on at least one active node$|failed to complete COPY on \S+:\d+$"
)
_LOST_WORKER_STATES = frozenset({"XX000", "58030"})


def lost_worker(exc: BaseException) -> bool:
    """True for a Citus coordinator's error saying that a worker it needed could not be reached (the
    connection-class ones, 08xxx, need no such test): the database, not the request, is at fault."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) not in _LOST_WORKER_STATES:
        return False
    primary = getattr(getattr(orig, "diag", None), "message_primary", None) or str(orig).strip().split("\n", 1)[0]
    return _LOST_WORKER.match(primary) is not None
