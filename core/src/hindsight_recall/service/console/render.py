"""Templates, security headers and the page decorator every console route goes through."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..base import engine_of
from ..errors import classify
from .auth import Logins, Sessions, fingerprint

log = logging.getLogger("hindsight_recall.console")

HERE = Path(__file__).parent
#: no script runs at all: the pages need none, so an injected one is refused by the browser too
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}

Page = Callable[[Request], Awaitable[Response]]


def segment(value: Any) -> str:
    """A path segment, every reserved character escaped (bank and memory ids are free text)."""
    return quote(str(value), safe="")


def _ms(seconds: Any) -> str:
    return f"{float(seconds or 0) * 1000:.1f}"


def _num(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _bytes(value: Any) -> str:
    """A size on disk, rounded (it is an estimate): ``≈ 1.2 GB``; a dash when unknown."""
    if value is None:
        return "–"
    size, unit = float(value), "B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            break
        size /= 1000
    return f"≈ {size:.0f} {unit}" if unit == "B" or size >= 100 else f"≈ {size:.1f} {unit}"


ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                         undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
ENV.filters.update(segment=segment, ms=_ms, num=_num, bytes=_bytes)


class Console:
    """What the pages share: the API key (if any) and the form-token sessions."""

    def __init__(self, key: str, login_lifetime: float) -> None:
        self.key, self.sessions, self.logins = key, Sessions(), Logins(key, login_lifetime)

    def render(self, request: Request, name: str, status: int = 200, media_type: str = "text/html",
               **context: Any) -> HTMLResponse:
        html = ENV.get_template(name).render(request=request, csrf=self.sessions.token(request),
                                             login=bool(self.key), **context)
        response = HTMLResponse(html, status_code=status, headers=HEADERS, media_type=media_type)
        self.sessions.remember(request, response)
        return response

    async def admitted(self, request: Request) -> bool:
        """The key lets the request in (:meth:`~.auth.Logins.authorized`), and its login was not ended."""
        if not self.logins.authorized(request):
            return False
        login = self.logins.login_of(request)
        return login is None or not await engine_of(request).logouts.ended(fingerprint(login))

    async def log_out(self, request: Request) -> None:
        """End the request's login in every process (its token is refused from now on)."""
        login = self.logins.login_of(request)
        expires = self.logins.expires(login) if login else None
        if login and expires:
            await engine_of(request).logouts.end(fingerprint(login), expires)

    def page(self, handler: Page, *, open_page: bool = False) -> Page:
        """Check the key (unless ``open_page``), refuse a POST without its form token, and answer any
        error as an HTML page with the API's status and message."""

        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            try:
                if not open_page and not await self.admitted(request):
                    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303,
                                            headers=HEADERS)
                if request.method == "POST":
                    form = await request.form()
                    if not self.sessions.valid(request, str(form.get("csrf", ""))):
                        return self.render(request, "error.html", 403, title="Refused", message="The form's "
                                           "token is missing or stale: reload the page and try again.")
                return await handler(request)
            except Exception as exc:
                error = classify(exc)
                if error.status >= 500:
                    log.error("console page %s failed: %s", request.url.path, error.message)
                return self.render(request, "error.html", error.status, title=f"Error {error.status}",
                                   message=error.message)

        return wrapped


def redirect(path: str) -> Response:
    return RedirectResponse(path, status_code=303, headers=HEADERS)
