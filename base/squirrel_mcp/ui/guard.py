"""Who may talk to the page: the browser that opened the printed URL, on this machine, and no one else.

Every request passes here before any page code runs:

- the Host header must be the page's own name at this port (a random
  `squirrel-….localhost`: squirrel_mcp.ui.session), so a web page whose own domain
  was re-pointed at 127.0.0.1 (DNS rebinding) gets nothing, and neither does a
  request for 127.0.0.1 or localhost, under which a cookie would be shared with
  every other listener on the address;
- the one-time token of the printed URL is traded, on the first visit, for a
  session cookie (host-only: no Domain, so it goes to this name alone; HttpOnly,
  SameSite=Strict) and a redirect to the same path without the token, so the token
  is neither in the history nor reusable (the redirect is built from the path alone
  and never leaves this page: `same_origin`);
- every later request needs that cookie, used within the session's idle lifetime:
  none is 401, an expired one 401 saying how to get back in, a wrong one 403, each
  with a one-line body and nothing else;
- a write (any method but GET and HEAD) also needs an Origin header naming this
  page (a form another site posts here is refused: CSRF);
- every answer carries a strict Content-Security-Policy and is never cached.

An exception a page raises is logged by its type only: its message or the
traceback's locals could hold memory text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from squirrel_mcp.core.lines import log_line
from squirrel_mcp.ui.session import Session, State, same

# Scripts, styles and images only from this page's own /static/; forms only back to it; no frames.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # Not no-referrer: under it a browser sends "Origin: null" with a form, and the Origin check
    # could not tell this page's writes from another's. Other sites get no referrer.
    (b"referrer-policy", b"same-origin"),
    # Memory text must not land in the browser's disk cache.
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
SAFE_METHODS = frozenset({"GET", "HEAD"})
# Left as they are in a redirect's path (RFC 3986's pchar less the unreserved, which quote keeps).
PATH_CHARACTERS = "/:@!$&'()*+,;="
TOKEN_PARAMETER = "token"  # noqa: S105 - the query parameter's name, not a secret
COOKIE_NAME = "squirrel_ui"


# Its lines name the page ("squirrel-mcp ui: ..."), apart from the server's.
UI_LOG = functools.partial(log_line, program="squirrel-mcp ui")


class Guard:
    """ASGI middleware in front of the page: the checks of the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        name: str,
        port: int,
        token: str,
        session: Session,
        redeemed: Callable[[], None] | None = None,
        log: Callable[[str], None] = UI_LOG,
    ) -> None:
        """Let through to `app` only requests for `name`:`port` from the holder of `token`.

        `session` is the page's session (its idle lifetime as `squirrel-mcp ui` read it);
        `redeemed` is called once the token has been traded for it (the
        browser's hand-off file is then deleted).
        """
        self._app = app
        self._token: str | None = token
        self._redeemed = redeemed
        self.session = session
        # Host-only, under a name no other listener answers to: the port needs no place in it.
        self.cookie_name = COOKIE_NAME
        self.host = f"{name}:{port}"
        self._origin = f"http://{self.host}"
        self._log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request, then pass it on or answer it here."""
        if scope["type"] != "http":
            return
        headers = _headers(scope)
        if headers.get("host") != self.host:
            # DNS rebinding (the browser believes it talks to another site), or the bare address,
            # under which the cookie would reach every listener on 127.0.0.1.
            await _plain(send, 421, "this page answers only at the address squirrel-mcp ui printed")
            return
        method = scope["method"]
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        token = next((value for name, value in query if name == TOKEN_PARAMETER), None)
        cookies = _cookies(headers)
        state = self.session.use(cookies.get(self.cookie_name))
        if state is State.LIVE:
            if method not in SAFE_METHODS and headers.get("origin") != self._origin:
                await _plain(send, 403, "a change must come from this page itself")
            elif token is not None:
                await self._redirect_without_token(scope, send, query, cookie=None)
            else:
                await self._call_page(scope, receive, send)
            return
        if token is None:
            await self._refuse(send, state, sent=self.cookie_name in cookies)
            return
        if method != "GET" or self._token is None or not same(token, self._token):
            await _plain(send, 403, "this token is not valid (each printed address opens once)")
            return
        self._token = None
        if self._redeemed is not None:
            self._redeemed()
        await self._redirect_without_token(scope, send, query, cookie=self.session.open())

    async def _refuse(self, send: Send, state: State, *, sent: bool) -> None:
        """No live session: say why in one line."""
        if state is State.EXPIRED:
            await _plain(
                send,
                401,
                f"signed out after {self.session.lifetime()} unused: stop squirrel-mcp ui, run it again",
            )
        elif sent:
            await _plain(send, 403, "open the address squirrel-mcp ui printed")
        else:
            await _plain(send, 401, "open the address squirrel-mcp ui printed")

    async def _redirect_without_token(
        self, scope: Scope, send: Send, query: list[tuple[str, str]], *, cookie: str | None
    ) -> None:
        rest = urlencode([(name, value) for name, value in query if name != TOKEN_PARAMETER])
        location = same_origin(scope["path"]) + (f"?{rest}" if rest else "")
        headers = [(b"location", location.encode())]
        if cookie is not None:
            # No Domain: the browser sends it back to this very name only.
            value = f"{self.cookie_name}={cookie}; Path=/; HttpOnly; SameSite=Strict"
            headers.append((b"set-cookie", value.encode()))
        await _answer(send, 303, b"", headers)

    async def _call_page(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def send_secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        try:
            await self._app(scope, receive, send_secured)
        except Exception as error:
            # The type only: a message or traceback could carry memory text into a log.
            self._log(f"internal error ({type(error).__name__}) answering {scope['method']} a page")
            if not started:
                await _plain(send, 500, "internal error; the terminal running squirrel-mcp ui names its type")


def same_origin(path: str) -> str:
    """`path` as a redirect that stays on this page: one leading slash, everything else escaped.

    "//evil.example/x" as it is would be a network-path reference (another site), and
    so would a backslash after the slash, or a tab between two slashes, once a browser
    has turned the backslash into a slash or dropped the tab; escaped, none of them
    leaves the origin.
    """
    return "/" + quote(path.lstrip("/"), safe=PATH_CHARACTERS)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of repeated ones)."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    jar = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except ValueError:
        # A malformed Cookie header is no session.
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _plain(send: Send, status: int, text: str) -> None:
    """A refusal: one line of plain text and nothing else."""
    await _answer(send, status, f"{text}\n".encode(), [(b"content-type", b"text/plain; charset=utf-8")])
