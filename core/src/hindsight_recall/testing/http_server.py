"""A real HTTP server on 127.0.0.1 for testing remote rerankers, and the rerank protocols it speaks.

:class:`FixtureServer` runs ``http.server`` in a thread, records every request, counts requests in
flight and answers from routes, or from scripted replies queued ahead of a route. The
``*_routes`` functions implement the TEI, Cohere (v2) and Jina rerank endpoints.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request as the server received it; header names are lower-cased, ``raw`` the body's bytes."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes = b""
    query: str = ""


@dataclass(frozen=True)
class Reply:
    """What to answer: JSON ``body`` (or ``raw`` bytes as given), after ``delay`` seconds."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None


Route = Callable[[Request], Reply]
Scorer = Callable[[str, str], float]
Routes = dict[tuple[str, str], Route]


class FixtureServer:
    """A threaded HTTP/1.1 server on an ephemeral 127.0.0.1 port; use it as a context manager."""

    def __init__(self, routes: Mapping[tuple[str, str], Route] | None = None) -> None:
        """Prepare the server; :meth:`start` binds the port.

        :param routes: ``(method, path) -> route``; more can be added with :meth:`route`.
        """
        self.routes: Routes = dict(routes or {})
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._scripts: dict[tuple[str, str], deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:<port>``."""
        if self._server is None:
            raise RuntimeError("the fixture server is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def route(self, method: str, path: str, route: Route) -> None:
        """Answer ``method path`` with ``route`` from now on.

        :param method: the HTTP method.
        :param path: the path, without query string.
        :param route: builds the reply from the request.
        """
        self.routes[(method, path)] = route

    def script(self, method: str, path: str, *replies: Reply) -> None:
        """Queue replies that the next requests to ``method path`` get before the route answers.

        :param method: the HTTP method.
        :param path: the path, without query string.
        :param replies: the replies, in order.
        """
        with self._lock:
            self._scripts[(method, path)].extend(replies)

    def requests_to(self, method: str, path: str) -> list[Request]:
        """The recorded requests to ``method path``, in arrival order.

        :param method: the HTTP method.
        :param path: the path.
        """
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    def reset(self) -> None:
        """Forget recorded requests, in-flight counts and queued replies."""
        with self._lock:
            self.requests.clear()
            self._scripts.clear()
            self.max_in_flight = self.in_flight

    def start(self) -> FixtureServer:
        """Bind an ephemeral port and serve in a daemon thread."""
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        # A short poll interval keeps stop() fast; the default half second adds up over many tests.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fixture-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; handlers still sleeping on a delay are abandoned."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FixtureServer:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def _answer(self, request: Request) -> Reply:
        key = (request.method, request.path)
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            scripted = self._scripts[key].popleft() if self._scripts.get(key) else None
        route = self.routes.get(key)
        if scripted is not None:
            return scripted
        if route is None:
            return Reply(404, {"error": f"no route for {request.method} {request.path}"})
        try:
            return route(request)
        except Exception as exc:  # a broken route must show up as a 500, not a hung client
            return Reply(500, {"error": repr(exc)})

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1


class _Server(ThreadingHTTPServer):
    # socketserver's backlog of 5 drops connections when dozens of calls open at once (retain's extraction)
    request_queue_size = 128


def _handler_for(server: FixtureServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real reranking servers do
        # Headers and body go out in two writes; with Nagle on, each reply waits ~40 ms for an ACK.
        disable_nagle_algorithm = True

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
            try:
                body = json.loads(data) if data else None
            except ValueError:
                body = data
            headers = {k.lower(): v for k, v in self.headers.items()}
            path, _, query = self.path.partition("?")
            request = Request(self.command, path, headers, body, data, query)
            reply = server._answer(request)
            try:
                time.sleep(reply.delay)
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (a timeout test); nothing to answer
            finally:
                server._done()

        do_GET = do_POST = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def overlap_score(query: str, text: str) -> float:
    """A deterministic relevance: the share of query words found in the text.

    :param query: the query.
    :param text: the document.
    """
    words = set(re.findall(r"\w+", query.lower()))
    found = words & set(re.findall(r"\w+", text.lower()))
    return len(found) / len(words) if words else 0.0


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"message": message, "error": message})


def _ranked(query: str, texts: list[str], score: Scorer, top_n: int | None) -> list[tuple[int, float]]:
    ranked = sorted(((i, score(query, t)) for i, t in enumerate(texts)), key=lambda p: (-p[1], p[0]))
    return ranked[:top_n] if top_n is not None else ranked


def _invalid(body: Any, documents_key: str, allowed: set[str] | None) -> str | None:
    if not isinstance(body, dict):
        return "body must be a JSON object"
    if allowed is not None and (unknown := sorted(set(body) - allowed)):
        return f"unknown field: parameter {unknown[0]!r} is not a valid field"
    if not isinstance(body.get("query"), str):
        return "query must be a string"
    texts = body.get(documents_key)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return f"{documents_key} must be a list of strings"
    return None


def _authorized(request: Request, api_key: str | None) -> bool:
    return api_key is None or request.headers.get("authorization") == f"Bearer {api_key}"


def tei_routes(*, score: Scorer = overlap_score, model_id: str = "fixture/tiny-reranker") -> Routes:
    """Text Embeddings Inference: ``GET /info`` and ``POST /rerank`` -> ``[{"index", "score"}]``.

    :param score: the relevance of each (query, text).
    :param model_id: what ``/info`` reports.
    """

    def info(request: Request) -> Reply:
        return Reply(
            body={"model_id": model_id, "model_type": {"reranker": {}}, "max_client_batch_size": 512}
        )

    def rerank(request: Request) -> Reply:
        if problem := _invalid(request.body, "texts", None):
            return Reply(422, {"error": problem, "error_type": "Validation"})
        body = request.body
        ranked = _ranked(body["query"], body["texts"], score, None)
        return Reply(body=[{"index": i, "score": s} for i, s in ranked])

    return {("GET", "/info"): info, ("POST", "/rerank"): rerank}


def cohere_routes(
    *, api_key: str | None = None, score: Scorer = overlap_score, path: str = "/v2/rerank"
) -> Routes:
    """Cohere v2: ``POST /v2/rerank`` -> ``{"results": [{"index", "relevance_score"}]}``; strict fields.

    :param api_key: the Bearer token to require, or ``None`` for none.
    :param score: the relevance of each (query, document).
    :param path: where to serve it.
    """
    allowed = {"model", "query", "documents", "top_n", "max_tokens_per_doc", "priority"}

    def rerank(request: Request) -> Reply:
        if not _authorized(request, api_key):
            return _error(401, "invalid api token")
        problem = _invalid(request.body, "documents", allowed)
        if problem is None and not isinstance(request.body.get("model"), str):
            problem = "model is required"
        if problem:
            return _error(422, problem)
        body = request.body
        ranked = _ranked(body["query"], body["documents"], score, body.get("top_n"))
        results = [{"index": i, "relevance_score": s} for i, s in ranked]
        return Reply(
            body={"id": "fixture", "results": results, "meta": {"billed_units": {"search_units": 1}}}
        )

    return {("POST", path): rerank}


def jina_routes(
    *, api_key: str | None = None, score: Scorer = overlap_score, path: str = "/v1/rerank"
) -> Routes:
    """Jina: ``POST /v1/rerank`` -> ``{"model", "usage", "results": [{"index", "relevance_score"}]}``.

    :param api_key: the Bearer token to require, or ``None`` for none.
    :param score: the relevance of each (query, document).
    :param path: where to serve it.
    """

    def rerank(request: Request) -> Reply:
        if not _authorized(request, api_key):
            return _error(401, "invalid api key")
        if problem := _invalid(request.body, "documents", None):
            return _error(422, problem)
        body = request.body
        ranked = _ranked(body["query"], body["documents"], score, body.get("top_n"))
        results: list[dict[str, Any]] = [{"index": i, "relevance_score": s} for i, s in ranked]
        if body.get("return_documents", True):
            for result in results:
                result["document"] = {"text": body["documents"][result["index"]]}
        usage = {"total_tokens": sum(len(d.split()) for d in body["documents"])}
        return Reply(body={"model": body.get("model"), "usage": usage, "results": results})

    return {("POST", path): rerank}
