"""Who may use the console, and cross-site request protection for its forms.

With an API key configured, a page request carries it either as ``Authorization: Bearer`` (as the API
does) or in the HttpOnly, SameSite=Strict cookie the login form sets. Every form carries a token
derived from a per-browser session cookie; a POST whose token does not match is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

#: where the console lives; the guard leaves these paths to :func:`authorized`
PREFIX = "/ui"
#: the cookie holding the API key after a login
KEY_COOKIE = "hindsight_console_key"
#: the cookie naming the browser's session, from which form tokens are derived
SESSION_COOKIE = "hindsight_console_session"
#: paths served without the key: the login form and the stylesheet it uses
OPEN_PATHS = ("/ui/login", "/ui/static/")


def is_console_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def authorized(request: Request, key: str) -> bool:
    """True when no key is configured, or the request carries it (header or cookie)."""
    if not key:
        return True
    header = request.headers.get("authorization", "").encode()
    cookie = request.cookies.get(KEY_COOKIE, "").encode()
    wanted = key.encode()
    return hmac.compare_digest(header, b"Bearer " + wanted) or hmac.compare_digest(cookie, wanted)


def is_open(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in OPEN_PATHS)


class Sessions:
    """Form tokens: an HMAC of the session cookie under a secret that lives as long as the process."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def session_of(self, request: Request) -> str:
        """The browser's session id; a new one (set by :meth:`remember`) when it has none."""
        found = request.cookies.get(SESSION_COOKIE, "")
        if len(found) == 43 and found.replace("-", "").replace("_", "").isalnum():
            return found
        fresh: str | None = getattr(request.state, "console_session", None)
        if fresh is None:
            fresh = secrets.token_urlsafe(32)
            request.state.console_session = fresh
        return fresh

    def token(self, request: Request) -> str:
        return hmac.new(self._secret, self.session_of(request).encode(), hashlib.sha256).hexdigest()

    def valid(self, request: Request, given: str) -> bool:
        """The form's token matches this browser's session (which must already exist)."""
        if SESSION_COOKIE not in request.cookies:
            return False
        return hmac.compare_digest(self.token(request).encode(), given.encode())

    def remember(self, request: Request, response: Response) -> None:
        """Set the session cookie when this request made a new one."""
        fresh = getattr(request.state, "console_session", None)
        if fresh:
            response.set_cookie(SESSION_COOKIE, fresh, httponly=True, samesite="strict", path=PREFIX,
                                secure=request.url.scheme == "https")


def set_key_cookie(request: Request, response: Response, key: str) -> None:
    response.set_cookie(KEY_COOKIE, key, httponly=True, samesite="strict", path=PREFIX,
                        secure=request.url.scheme == "https")
