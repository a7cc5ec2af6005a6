"""Reading a transfer archive (see :mod:`.archive`) in a process of its own, checked whole before anything
is written.

An upload is untrusted: its entries are JSON that may nest 200,000 levels deep, expand a thousandfold or
name fields with the wrong types. :func:`read_archive` runs ``python -m hindsight_recall.archive_reader``
on the saved upload, so no parse ever holds the server's event loop (or its interpreter lock); the
child checks the ZIP's entry count and expanded size against the limits first, then reads every entry
and every field, and only when all of it holds writes the memories, links and invalidated memories it
found to a file of small pickled records. The server then reads the records a few hundred memories at a
time while it writes them. A refusal names the entry and the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import sys
import zipfile
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from ._archive_fields import Refused, depth_checked, read_date, read_document, read_link, read_observation, read_text
from .archive import INVALIDATED_ENTRY, LINKS_ENTRY, OURS, SCHEMA_VERSION, invalid
from .errors import RetainError
from .jsonl import parse_memory
from .scratch import work_folder
from .types import Memory

#: memories per record: what the server unpickles at once stays a few milliseconds of work
RECORD_MEMORIES = 500
#: links per record
RECORD_LINKS = 10_000


@dataclass(frozen=True)
class Limits:
    """What an archive may hold (ARCHIVE_MAX_BYTES, ARCHIVE_MAX_ENTRIES, ARCHIVE_MAX_DEPTH)."""

    max_bytes: int
    max_entries: int
    max_depth: int


class Record(NamedTuple):
    """A part of an archive's contents, in the order the server writes them.

    ``kind`` is ``document`` (``items``: (memory, created_at) pairs of one document, ``last`` on its
    final part; ``extra``: the document's (created_at, updated_at) and its chunks' indexes by text),
    ``observations`` ((memory, created_at) pairs), ``links`` ((from, to, type, weight)) or
    ``invalidated`` ((memory, reason, invalidated_at)).
    """

    kind: str
    document_id: str | None
    items: list[Any]
    last: bool = True
    extra: Any = None


@dataclass
class Contents:
    """What the reader found: the archive's description, and its records on disk (:meth:`records`)."""

    source_bank_id: str
    archive_type: str
    #: the archive carries our links (restored exactly) rather than upstream's causal relations
    own_links: bool
    bank_row: dict[str, Any] | None
    documents: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    path: Path | None = None

    async def records(self) -> AsyncIterator[Record]:
        """The records, read one at a time off the event loop."""
        assert self.path is not None
        handle = await asyncio.to_thread(open, self.path, "rb")
        try:
            while True:
                try:
                    record = await asyncio.to_thread(pickle.load, handle)
                except EOFError:
                    return
                yield record
        finally:
            handle.close()


# --- the server's side ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def read_archive(source: Path, limits: Limits, *, merge: bool) -> AsyncIterator[Contents]:
    """Check the archive at ``source`` whole in a child process; yields its :class:`Contents` (their
    records file is removed afterwards).

    :param merge: read it for a merge (documents only; their sources and our links are not used).
    :raises InvalidRequest: (400) the archive breaks a limit or holds a malformed entry, named.
    """
    with work_folder("archive") as work:
        out = work / "records"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hindsight_recall.archive_reader", str(source), str(out),
            json.dumps({**asdict(limits), "merge": merge}),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            stdout, stderr = await proc.communicate()
        except BaseException:  # the request was cancelled: the child goes with it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        answer = _answer(stdout)
        if proc.returncode != 0 or answer is None:
            last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            raise invalid(f"the archive could not be read: its reader stopped ({last[0][:300]})")
        if "refused" in answer:
            raise invalid(answer["refused"])
        yield Contents(**answer["contents"], path=out)


def _answer(stdout: bytes) -> dict[str, Any] | None:
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


# --- the child's side ------------------------------------------------------------------------------


class Reader:
    """Reads one archive: limits first, then every entry; writes records only for what holds."""

    def __init__(self, source: str, limits: Limits, merge: bool) -> None:
        self.limits, self.merge = limits, merge
        try:
            self.zf = zipfile.ZipFile(source)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise Refused(f"not a readable .zip ({exc})") from None
        infos = self.zf.infolist()
        if len(infos) > limits.max_entries:
            raise Refused(f"{len(infos)} entries; at most {limits.max_entries} are read "
                          "(HINDSIGHT_API_ARCHIVE_MAX_ENTRIES)")
        expanded = sum(i.file_size for i in infos)
        if expanded > limits.max_bytes:
            raise Refused(f"its entries expand to {expanded} bytes; at most {limits.max_bytes} are read "
                          "(HINDSIGHT_API_ARCHIVE_MAX_BYTES)")
        self.names = set(self.zf.NameToInfo)
        #: every memory id read so far -> where it was read
        self.seen: dict[str, str] = {}
        #: document id -> its memories' ids in fact order (upstream's observations cite by ordinal)
        self.by_document: dict[str, list[str]] = {}
        #: (where, memory id) of every source a memory cites, checked once every memory is read
        self.cited: list[tuple[str, str]] = []

    def json(self, name: str) -> Any:
        try:
            raw = self.zf.read(name)
        except (zipfile.BadZipFile, OSError, zlib.error, EOFError, ValueError) as exc:
            raise Refused(f"{name}: cannot be read from the .zip ({exc})") from None
        return self.parse(raw, name)

    def parse(self, raw: bytes, where: str) -> Any:
        try:
            value = json.loads(raw)
        except RecursionError:
            raise Refused(f"{where}: nested deeper than {self.limits.max_depth} levels "
                          "(HINDSIGHT_API_ARCHIVE_MAX_DEPTH)") from None
        except ValueError as exc:
            raise Refused(f"{where}: not valid JSON ({exc})") from None
        return depth_checked(value, self.limits.max_depth, where)

    def manifest(self) -> dict[str, Any]:
        if "manifest.json" not in self.names:
            raise Refused("manifest.json is missing; this route takes a .zip made by a transfer export")
        manifest = self.json("manifest.json")
        if not isinstance(manifest, dict):
            raise Refused("manifest.json: must be a JSON object")
        version = manifest.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise Refused(f"manifest.json: schema_version: unsupported schema version {version!r} "
                          f"(this server reads {SCHEMA_VERSION})")
        source = manifest.get("source_bank_id")
        if not isinstance(source, str) or not source.strip():
            raise Refused("manifest.json: source_bank_id: must be a non-empty string")
        kind = manifest.get("archive_type", "documents")
        if kind not in ("bank", "documents"):
            raise Refused(f"manifest.json: archive_type: {kind!r} is not 'bank' or 'documents'")
        return manifest

    def run(self, out: IO[bytes]) -> dict[str, Any]:
        manifest = self.manifest()
        own_links = not self.merge and LINKS_ENTRY in self.names
        counts = {"documents": 0, "facts": 0, "observations": 0, "links": 0, "invalidated": 0}
        documents: list[str] = []
        for name in sorted(n for n in self.names if n.startswith("documents/") and n.endswith(".json")):
            doc = self.json(name)
            document_id, memories, extra = read_document(doc, name, own_links=own_links, merge=self.merge)
            self.remember(document_id, [m for m, _ in memories], name)
            if not memories:  # a document is its memories: one without any is nothing to import
                continue
            for start in range(0, len(memories), RECORD_MEMORIES):
                part = memories[start : start + RECORD_MEMORIES]
                last = start + RECORD_MEMORIES >= len(memories)
                pickle.dump(Record("document", document_id, part, last, extra if last else None), out)
            documents.append(document_id)
            counts["documents"] += 1
            counts["facts"] += len(memories)
        if not self.merge:
            counts["observations"] = self.observations(out)
            counts["links"] = self.links(out) if own_links else 0
            counts["invalidated"] = self.invalidated(out)
            self.check_sources()
        row = None if self.merge else self.bank_row()
        return {"source_bank_id": manifest["source_bank_id"], "archive_type": manifest.get("archive_type", "documents"),
                "own_links": own_links, "bank_row": row, "documents": documents, "counts": counts}

    def remember(self, document_id: str | None, memories: list[Memory], where: str) -> None:
        ids = []
        for index, memory in enumerate(memories):
            first = self.seen.get(memory.id)
            if first is not None:
                raise Refused(f"{where}: facts[{index}]: id {memory.id!r} appears twice (first in {first})")
            self.seen[memory.id] = where
            ids.append(memory.id)
            self.cited.extend((f"{where}: {memory.id!r}", source) for source in memory.source_ids)
        if document_id is not None:
            self.by_document.setdefault(document_id, []).extend(ids)

    def observations(self, out: IO[bytes]) -> int:
        name = "observations.json"
        found = self.json(name) if name in self.names else []
        if not isinstance(found, list):
            raise Refused(f"{name}: must be a JSON array")
        memories = [read_observation(obs, f"{name}: [{i}]", i, self.by_document) for i, obs in enumerate(found)]
        self.remember(None, [m for m, _ in memories], name)
        return _records(out, "observations", memories, RECORD_MEMORIES)

    def lines(self, name: str) -> Iterator[tuple[int, Any]]:
        try:
            with self.zf.open(name) as handle:
                for number, line in enumerate(handle, start=1):
                    if line.strip():
                        yield number, self.parse(line, f"{name} line {number}")
        except (zipfile.BadZipFile, OSError, zlib.error, EOFError) as exc:
            raise Refused(f"{name}: cannot be read from the .zip ({exc})") from None

    def links(self, out: IO[bytes]) -> int:
        found = (read_link(obj, f"{LINKS_ENTRY} line {number}") for number, obj in self.lines(LINKS_ENTRY))
        return _records(out, "links", found, RECORD_LINKS)

    def invalidated(self, out: IO[bytes]) -> int:
        if INVALIDATED_ENTRY not in self.names:
            return 0
        found = (self.invalidated_line(obj, f"{INVALIDATED_ENTRY} line {number}")
                 for number, obj in self.lines(INVALIDATED_ENTRY))
        return _records(out, "invalidated", found, RECORD_MEMORIES)

    def invalidated_line(self, obj: Any, where: str) -> tuple[Memory, str | None, datetime | None]:
        """One line of our invalidated memories: (memory, reason, when)."""
        if not isinstance(obj, dict):
            raise Refused(f"{where}: must be a JSON object")
        try:
            memory = parse_memory(obj.get("memory"))[1]
        except RetainError as exc:
            raise Refused(f"{where}: memory.{exc.field}: {exc.why}") from None
        if memory.id in self.seen:
            raise Refused(f"{where}: memory.id: {memory.id!r} is also a stored memory ({self.seen[memory.id]})")
        return memory, read_text(obj, "reason", where), read_date(obj, "invalidated_at", where, upstream=False)

    def check_sources(self) -> None:
        """Every source a memory names is a memory of the archive (a restore writes into a new bank)."""
        for where, source in self.cited:
            if source not in self.seen:
                raise Refused(f"{where}: sources: {source!r} is not a memory of this archive"[:300])

    def bank_row(self) -> dict[str, Any] | None:
        if "banks.json" not in self.names:
            return None
        rows = self.json("banks.json")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise Refused("banks.json: must be a JSON array of objects")
        if not rows:
            return None
        row = dict(rows[0])
        for key in ("name", "mission", "background"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise Refused(f"banks.json: [0].{key}: must be a string")
        for key in ("disposition", "config"):
            value = row.get(key)
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except (ValueError, RecursionError):
                    raise Refused(f"banks.json: [0].{key}: not valid JSON") from None
            if value is not None and not isinstance(value, dict):
                raise Refused(f"banks.json: [0].{key}: must be an object")
            row[key] = depth_checked(value, self.limits.max_depth, f"banks.json: [0].{key}")
        ours = row.get(OURS)
        if ours is not None and (not isinstance(ours, dict) or not all(
                isinstance(ours.get(k, {}), dict) for k in ("profile", "config"))):
            raise Refused(f"banks.json: [0].{OURS}: must be an object whose profile and config are objects")
        return row


def _records(out: IO[bytes], kind: str, items: Iterable[Any], size: int) -> int:
    """Write ``items`` as records of ``kind``, ``size`` at a time; how many there were."""
    batch: list[Any] = []
    count = 0
    for item in items:
        batch.append(item)
        count += 1
        if len(batch) >= size:
            pickle.dump(Record(kind, None, batch), out)
            batch = []
    if batch:
        pickle.dump(Record(kind, None, batch), out)
    return count


def main(argv: list[str]) -> int:
    """``python -m hindsight_recall.archive_reader SOURCE OUT LIMITS``: the last line of stdout is the
    answer, ``{"contents": ...}`` or ``{"refused": why}``."""
    source, out, options = argv
    settings = json.loads(options)
    limits = Limits(settings["max_bytes"], settings["max_entries"], settings["max_depth"])
    try:
        with open(out, "wb") as handle:
            contents = Reader(source, limits, bool(settings["merge"])).run(handle)
    except Refused as exc:
        print(json.dumps({"refused": f"invalid transfer archive: {exc}"}))
        return 0
    except (MemoryError, RecursionError, zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as exc:
        print(json.dumps({"refused": f"invalid transfer archive: cannot be read ({type(exc).__name__}: {exc})"}))
        return 0
    print(json.dumps({"contents": contents}, default=str))
    return 0


if __name__ == "__main__":
    # run under the module's own name, so the records pickle classes the server can find
    from hindsight_recall.archive_reader import main as run_under_own_name

    raise SystemExit(run_under_own_name(sys.argv[1:]))
