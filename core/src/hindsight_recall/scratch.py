"""Work folders of imports and clones, in one known place, and the removal of those a killed process left.

An import saves its upload, and reads its archive, into a folder of its own; a clone writes its archive
into one. The folder goes when the work ends, but a process killed meanwhile (SIGKILL, a crash, the
machine stopping) leaves it behind, with up to an archive's size in it. Every work folder is made in
:func:`place` and named after the process that made it (its id and start time), so an engine's start
(:func:`sweep`) removes the folders whose process is gone, and never one a live process still uses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


def place() -> Path:
    """Where work folders are made: ``hindsight-recall-work-<user id>`` in the system's temporary folder
    (``TMPDIR``), so that every process of one user on the machine finds the others' folders."""
    return Path(tempfile.gettempdir()) / f"hindsight-recall-work-{os.geteuid()}"


def _started(pid: int) -> int | None:
    """When process ``pid`` started, in hundredths of a second since the epoch; ``None`` when it is gone."""
    import psutil  # late: only work folders need it

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return int(round(proc.create_time() * 100))
    except psutil.Error:
        return None


@contextlib.contextmanager
def work_folder(kind: str) -> Iterator[Path]:
    """A new, empty folder for one piece of work, removed when the block ends.

    :param kind: what it holds (``upload``, ``archive``, ``clone``), the start of its name.
    """
    root = place()
    root.mkdir(mode=0o700, exist_ok=True)
    folder = root / f"{kind}-{os.getpid()}-{_started(os.getpid())}-{secrets.token_hex(4)}"
    folder.mkdir(mode=0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sweep() -> int:
    """Remove the work folders whose process is gone (killed while it worked); how many went."""
    root = place()
    try:
        found = list(root.iterdir())
    except OSError:  # no work folder was ever made here
        return 0
    removed = 0
    for folder in found:
        parts = folder.name.split("-")
        if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
            continue  # not a work folder
        started = _started(int(parts[1]))
        if started is not None and abs(started - int(parts[2])) <= 1:
            continue  # its process still runs
        shutil.rmtree(folder, ignore_errors=True)
        removed += not folder.exists()
    if removed:
        log.warning("removed %d work folder(s) in %s left by processes that were killed", removed, root)
    return removed
