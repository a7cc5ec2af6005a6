"""Who may use the console, and cross-site request protection for its forms.

With an API key configured, a page request carries either the key as ``Authorization: Bearer`` (as the
API does) or the login the login form gave it: an HttpOnly, SameSite=Strict cookie holding a signed,
expiring token (:class:`Logins`), never the key itself. The token is signed with a secret derived from
the key, so every process serving that key accepts it and a new key ends every login; logging out ends
one login in every process (the database keeps it until the token expires). Every form
carries a token derived from a per-browser session cookie; a POST whose token does not match is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

from starlette.requests import Request
from starlette.responses import Response

#: where the console lives; the guard leaves these paths to :func:`authorized`
PREFIX = "/ui"
#: the cookie holding a login (a signed token, see :class:`Logins`)
LOGIN_COOKIE = "hindsight_console_login"
#: what the login tokens' secret is derived from the key with
_LOGIN_CONTEXT = b"hindsight-recall console login v1"
#: the cookie naming the browser's session, from which form tokens are derived
SESSION_COOKIE = "hindsight_console_session"
#: paths served without the key: the login form and the stylesheet it uses
OPEN_PATHS = ("/ui/login", "/ui/static/")


def is_console_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


class Logins:
    """Login tokens: ``v1.<expiry>.<nonce>.<signature>``, the signature an HMAC under a secret derived
    from the API key. Nothing in a token tells the key; one stops working when it expires or the key
    changes.

    :param key: the API key (empty: no login needed).
    :param lifetime: seconds a login lasts (CONSOLE_SESSION_TTL).
    """

    def __init__(self, key: str, lifetime: float) -> None:
        self.key, self.lifetime = key, lifetime
        self._secret = hmac.new(key.encode(), _LOGIN_CONTEXT, hashlib.sha256).digest()

    def _signature(self, body: str) -> str:
        mac = hmac.new(self._secret, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def issue(self, now: float | None = None) -> str:
        """A new login token, good for :attr:`lifetime` seconds."""
        expires = int((time.time() if now is None else now) + self.lifetime)
        body = f"v1.{expires}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._signature(body)}"

    def expires(self, token: str, now: float | None = None) -> int | None:
        """When the token stops working (epoch seconds), or ``None`` unless it was issued under this key
        and has not expired."""
        body, _, signature = token.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or parts[0] != "v1" or not parts[1].isdigit() or len(token) > 200:
            return None
        if not hmac.compare_digest(signature.encode(), self._signature(body).encode()):
            return None
        expires = int(parts[1])
        return expires if expires > (time.time() if now is None else now) else None

    def valid(self, token: str, now: float | None = None) -> bool:
        """The token was issued under this key and has not expired."""
        return self.expires(token, now) is not None

    def authorized(self, request: Request) -> bool:
        """True when no key is configured, or the request carries the key (header) or a valid login; a
        login may still have been ended (:meth:`login_of`, :func:`fingerprint`)."""
        return not self.key or self._has_key(request) or self.valid(request.cookies.get(LOGIN_COOKIE, ""))

    def _has_key(self, request: Request) -> bool:
        header = request.headers.get("authorization", "").encode()
        return hmac.compare_digest(header, b"Bearer " + self.key.encode())

    def login_of(self, request: Request) -> str | None:
        """The login token that lets this request in, or ``None`` when no key is needed or the header
        carries it (then there is no login to have ended)."""
        if not self.key or self._has_key(request):
            return None
        token = request.cookies.get(LOGIN_COOKIE, "")
        return token if self.valid(token) else None

    def remember(self, request: Request, response: Response) -> None:
        """Set the login cookie: a new token, kept by the browser no longer than it is good."""
        response.set_cookie(LOGIN_COOKIE, self.issue(), max_age=int(self.lifetime), httponly=True,
                            samesite="strict", path=PREFIX, secure=request.url.scheme == "https")


def fingerprint(token: str) -> str:
    """What an ended login is recorded as: a hash of its token, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


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

