"""Run one command beside a throwaway Citus cluster, started as ``tests(citus)`` starts it::

    python -m hindsight_recall.testing.with_citus [--workers 2] -- hindsight-recall bench scale --database-url {url}

The cluster is :func:`~hindsight_recall.testing.pgserver.citus_cluster`: Citus built once (or taken
from the cache), a coordinator and ``--workers`` workers on 127.0.0.1. ``{url}`` in the command
becomes the coordinator's URL. The cluster stops when the command ends, fails or is interrupted;
the exit code is the command's.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from .pgserver import Unavailable, citus_cluster

USAGE = ("usage: python -m hindsight_recall.testing.with_citus [--workers N] -- COMMAND [ARG ...]"
         "  ({url} in the command: the coordinator's URL)")


def main(argv: Sequence[str] | None = None) -> int:
    """Start the cluster, run the command after ``--`` with ``{url}`` filled in, stop the cluster.

    Exit 2 on a bad command line, 3 with one line saying why when Citus cannot be built here.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    workers = 2
    if args[:1] == ["--workers"] and len(args) > 1 and args[1].isdigit():
        workers, args = int(args[1]), args[2:]
    if args[:1] != ["--"] or len(args) < 2:
        print(USAGE, file=sys.stderr)
        return 2

    def echo(line: str) -> None:
        print(line, flush=True)

    try:
        with citus_cluster(workers=workers, echo=echo) as cluster:
            echo(f"citus: a coordinator (port {cluster.coordinator.port}) and {workers} workers on 127.0.0.1")
            command = [a.replace("{url}", cluster.url) for a in args[1:]]
            process = subprocess.Popen(command)
            try:
                return process.wait()
            except KeyboardInterrupt:
                # Ctrl-C reached the command too: it cleans up on the cluster before the cluster stops
                return process.wait()
    except Unavailable as exc:
        echo(f"citus cannot be built here: {exc}")
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
