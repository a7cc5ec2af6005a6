"""The HTTP service (``hindsight-recall serve``): upstream Hindsight's API over this engine.

Importing this package loads nothing heavy; :mod:`.app` builds the application and :mod:`.client`
is the thin HTTP client the command line uses with ``--url``.
"""
