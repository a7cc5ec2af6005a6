"""Upstream routes this server does not serve: each answers 501 with a JSON error naming it and why.

Each needs a model's work this server does not do (its model extracts retain's facts and answers
reflect, nothing else), or a store it does not keep; the message says which. A client calling one
learns that at once, never from a bare 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import ServiceError, error_response

#: why the routes whose work is a model's are not served (retain's facts and reflect's answer are)
MODEL_WORK = "this server's model writes nothing but retain's facts and reflect's answer"
#: why the mental-model routes that write are not served
WRITTEN = "mental models are written by a model (a long-lived reflect), which this server does not do"
CONSOLIDATION = f"{MODEL_WORK}: it does not consolidate memories into observations"
B = "/v1/default/banks/{bank_id}"

#: (path, methods, reason): every upstream route answered 501, literal paths before ``{param}`` ones
UNSERVED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (f"{B}/mental-models", ("POST",), f"{WRITTEN}; creating one runs its source query through reflect's agent"),
    (f"{B}/mental-models/{{mental_model_id}}/refresh", ("POST",), f"{WRITTEN}; refreshing one asks the model again"),
    (f"{B}/mental-models/{{mental_model_id}}/dry-run-refresh", ("POST",),
     f"{WRITTEN}; a dry run is the model's answer without storing it"),
    (f"{B}/knowledge-base/pages", ("POST",), f"{WRITTEN}; a knowledge page is a mental model"),
    (f"{B}/knowledge-base/folders", ("POST",), "knowledge-base folders hold knowledge pages (mental models), "
                                               "which this server does not keep"),
    (f"{B}/consolidate", ("POST",), CONSOLIDATION),
    (f"{B}/consolidation-strategies/preview", ("POST",), CONSOLIDATION),
    (f"{B}/consolidation/recover", ("POST",), CONSOLIDATION),
)


def _answer(methods: tuple[str, ...], path: str, reason: str) -> Route:
    async def unserved(request: Request) -> Response:
        route = f"{request.method} {path}"
        return error_response(ServiceError(501, "not_implemented", f"{route} is not served: {reason}"), request.scope)

    return Route(path, unserved, methods=list(methods))


def routes() -> list[Route]:
    """One route per row of :data:`UNSERVED`, each answering 501."""
    return [_answer(methods, path, reason) for path, methods, reason in UNSERVED]
