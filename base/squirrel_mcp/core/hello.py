"""What a bridge says first to a vault's memory process, and how the process answers it.

A bridge opens its connection with one JSON line: the squirrel-mcp version, the
vault's identity, its settings, its passphrase and its session's project (worked out
in the bridge's own folder, so hosts in two repositories share one process and stay
apart). The memory process answers
one line, `{"ok": true}` or `{"refused": LINE}`, and from then on the
connection carries the host's MCP session, one JSON-RPC message per line.
`squirrel-mcp ui` says the same hello with a `page` (the port, and whether a
browser is to be handed the address): once the page listens the process answers
one more line, `{"url": URL, "handoff": FILE-URI or null}` or `{"error": LINE}`,
and serves the page until the connection closes. `squirrel-mcp passphrase` says
it with `"passphrase changed": true` and the new passphrase once it has changed
it: the process takes the new one if it opens the account's key, and the
connection ends with the answer. `squirrel-mcp hook` says it with a `hook` (the
event, a prompt's text, the answer's budget in characters): once taken, the
process answers one more line, `{"text": TEXT or null}` or `{"error": LINE}`, and
the connection ends. A hook is read-only and comes from a host's environment,
which holds no passphrase: the process takes it from any process of this user's
(the channel's check) without one, its settings not compared, the version aside
(see cli.admission). A
bridge is refused when its settings are not the running process's (the line
names the settings that differ, never a value) or its passphrase is not the one the
process was unlocked with. Only the user's own processes can connect (see
squirrel_mcp.core.channel), and nothing of the hello is ever logged.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NamedTuple

from squirrel_mcp import __version__
from squirrel_mcp.core.config import check_api_base_url

if TYPE_CHECKING:
    import socket
    from typing import IO

    from squirrel_mcp.core.channel import Channel
    from squirrel_mcp.core.config import Config

PROTOCOL = 1
IDLE_VARIABLE = "SQUIRREL_MCP_SHARED_IDLE"
# How long a memory process stays once no bridge is connected, in seconds, unless IDLE_VARIABLE says.
DEFAULT_IDLE = 600.0
# The longest hello read: a hello is a few hundred bytes; a longer line is no bridge's.
MAX_HELLO = 64 * 1024
MAX_PORT = 65535
# The events a hook asks about that need the vault, and the longest prompt a hook sends (the
# search tool's own bound on a query: a pasted file says nothing a search could use).
HOOK_EVENTS = ("session-start", "prompt")
MAX_HOOK_PROMPT = 1000
MAX_HOOK_BUDGET = 1_000_000
# The variables the memory process reads that two hosts must agree on: the plugins and how they
# run (the embeddings plugin's too, by name: core never imports a plugin). Only these are compared:
# anything else a host's environment holds (a sync server's database URL, say) may be a secret,
# and never travels in a hello. The vault, the cache and the account are the identity's; the
# passphrase is compared on its own; the sharing's own variables are the bridge's.
SETTINGS = (
    "SQUIRREL_MCP_PLUGINS",
    "SQUIRREL_MCP_TRACE_HOOKS",
    "SQUIRREL_MEMORY_EMBEDDINGS",
    "SQUIRREL_MEMORY_MODEL_DIR",
)
VERSION = "squirrel-mcp version"
CLOSE_OTHERS = "close the other hosts of this vault (its memory process ends once none is left)"
ON_ITS_OWN = "set SQUIRREL_MCP_SHARED=0 in this host's config"
FIX = f"{CLOSE_OTHERS} or {ON_ITS_OWN}"


class HelloError(Exception):
    """A hello that is not one: the connection is closed without an answer."""


class NotUnicode(HelloError):
    """A hello holding text no comparison or digest can encode: refused with NOT_UNICODE, then closed."""


NOT_UNICODE = (
    "this host's settings or passphrase hold text that is not Unicode (a lone surrogate, or bytes "
    "that are not UTF-8); nothing was done: correct them in this host's config"
)


def identity(config: Config) -> str:
    """What a memory process serves: a local vault's full path, or the server and key; and the cache.

    The cache directory holds this machine's view of the log (checkpoint, snapshot, vector
    file): hosts given different ones are as two machines, each with its own process. The
    parts are a JSON list, so no path (which may hold any text) runs into the next part.
    """
    cache = str(config.cache_dir.expanduser().resolve())
    if config.api_base_url is None:
        return json.dumps(["vault", str(config.vault_path.expanduser().resolve()), "cache", cache])
    import hmac  # only for a sync account: a local vault's bridge does without OpenSSL

    key = hmac.new(b"squirrel-mcp channel", (config.api_key or "").encode("utf-8"), "sha256").hexdigest()
    return json.dumps(["account", check_api_base_url(config.api_base_url), key, "cache", cache])


def settings(config: Config, env: dict[str, str]) -> dict[str, str]:
    """What must be the same for two hosts to share a memory process: the version, the SETTINGS set."""
    chosen = {name: env[name] for name in SETTINGS if env.get(name)}
    chosen[VERSION] = __version__
    return dict(sorted(chosen.items()))


class PageRequest(NamedTuple):
    """What `squirrel-mcp ui` asks of the memory process: the page on `port` (0: a free one)."""

    port: int
    # Whether a hand-off file is written for a browser (`squirrel-mcp ui` without --no-browser).
    handoff: bool
    # How long the page's session lasts unused, in seconds, as the command's SQUIRREL_UI_IDLE
    # says (the page is the command's: the process's own environment is some host's).
    idle: float


class HookRequest(NamedTuple):
    """What `squirrel-mcp hook` asks: the text for `event` (HOOK_EVENTS) within `budget` characters."""

    event: str
    budget: int
    # The prompt's text (`prompt` only), at most MAX_HOOK_PROMPT characters.
    prompt: str | None = None

    def __repr__(self) -> str:
        """The request without its prompt."""
        return f"HookRequest(event={self.event!r}, budget={self.budget!r}, prompt=<hidden>)"


class Hello(NamedTuple):
    """A bridge's first line; `page` for `squirrel-mcp ui`'s; `changed` for `squirrel-mcp passphrase`'s.

    `hook`: `squirrel-mcp hook`'s, answered with one line of text (no MCP session follows).

    `changed`: the passphrase was just changed to this hello's; the process that opened the
    account with the old one takes the new one and refuses the old one from then on.
    """

    identity: str
    settings: dict[str, str]
    passphrase: str | None
    page: PageRequest | None = None
    changed: bool = False
    # The project of the host session this bridge serves (None: none); never compared.
    project: str | None = None
    hook: HookRequest | None = None

    def __repr__(self) -> str:
        """The hello without its passphrase or project."""
        hidden = "<hidden>" if self.passphrase else None
        return (
            f"Hello(identity={self.identity!r}, settings={self.settings!r}, passphrase={hidden}, "
            f"page={self.page!r}, changed={self.changed!r}, project=<hidden>, hook={self.hook!r})"
        )

    def line(self) -> bytes:
        """The hello as the line a bridge sends."""
        message: dict[str, Any] = {"squirrel-mcp": PROTOCOL, "identity": self.identity}
        message["settings"], message["passphrase"] = self.settings, self.passphrase
        if self.page is not None:
            message["page"] = {"port": self.page.port, "handoff": self.page.handoff, "idle": self.page.idle}
        if self.changed:
            message["passphrase changed"] = True
        if self.project is not None:
            message["project"] = self.project
        if self.hook is not None:
            message["hook"] = {
                "event": self.hook.event,
                "budget": self.hook.budget,
                "prompt": self.hook.prompt,
            }
        return json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n"

    @classmethod
    def read(cls, line: bytes) -> Hello:
        """The hello on `line`; HelloError when it is none."""
        try:
            message: Any = json.loads(line)
        except (ValueError, RecursionError):
            raise HelloError("not JSON") from None
        if not isinstance(message, dict) or message.get("squirrel-mcp") != PROTOCOL:
            raise HelloError("not a hello of this protocol")
        given, passphrase, where = message.get("settings"), message.get("passphrase"), message.get("identity")
        if not isinstance(where, str) or not isinstance(given, dict):
            raise HelloError("no identity or settings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
            raise HelloError("settings that are not text")
        if passphrase is not None and not isinstance(passphrase, str):
            raise HelloError("a passphrase that is not text")
        # JSON's \u escapes spell lone surrogates, which no comparison or digest can encode.
        if not all(_encodes(text) for text in (where, passphrase or "", *given, *given.values())):
            raise NotUnicode("text that is not Unicode")
        changed, page = message.get("passphrase changed", False), _page_request(message.get("page"))
        if not isinstance(changed, bool) or (changed and (page is not None or passphrase is None)):
            raise HelloError("a passphrase change that is not one")
        hook = _hook_request(message.get("hook"))
        if hook is not None and (page is not None or changed):
            raise HelloError("a hook that asks for something else too")
        return cls(where, given, passphrase, page, changed, _project(message.get("project")), hook)


def _encodes(text: str) -> bool:
    """Whether `text` is Unicode text that UTF-8 can hold (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _project(project: Any) -> str | None:
    """A hello's project; HelloError when it is not a project's name."""
    if project is None:
        return None
    from squirrel_mcp.core.projects import ProjectError, project_name

    if not isinstance(project, str):
        raise HelloError("a project that is not text")
    try:
        named = project_name(project)
    except ProjectError:
        raise HelloError("a project that is not a project's name") from None
    if named != project:
        raise HelloError("a project that is not a project's name")
    return named


def _hook_request(hook: Any) -> HookRequest | None:
    """A hello's `hook`; HelloError when it is not one."""
    if hook is None:
        return None
    if not isinstance(hook, dict):
        raise HelloError("a hook that is not an object")
    event, budget, prompt = hook.get("event"), hook.get("budget"), hook.get("prompt")
    if event not in HOOK_EVENTS or type(budget) is not int or not 0 < budget <= MAX_HOOK_BUDGET:
        raise HelloError("a hook whose event or budget is not one")
    if (event == "prompt") != isinstance(prompt, str) or (event != "prompt" and prompt is not None):
        raise HelloError("a hook whose prompt is not text, or a prompt where none belongs")
    if prompt is not None and (len(prompt) > MAX_HOOK_PROMPT or not _encodes(prompt)):
        raise HelloError("a hook whose prompt is too long or not Unicode")
    return HookRequest(event, budget, prompt)


def _page_request(page: Any) -> PageRequest | None:
    """A hello's `page`; HelloError when it is not one."""
    if page is None:
        return None
    port, handoff = (page.get("port"), page.get("handoff")) if isinstance(page, dict) else (None, None)
    if type(port) is not int or not 0 <= port <= MAX_PORT or not isinstance(handoff, bool):
        raise HelloError("a page that is not a port and a hand-off flag")
    idle = page.get("idle")
    if type(idle) not in (int, float) or not 0 < idle < float("inf"):
        raise HelloError("a page whose idle time is not a number of seconds")
    return PageRequest(port, handoff, float(idle))


def _same(one: str | None, other: str | None) -> bool:
    """Whether two secrets are the same, compared in constant time."""
    import hmac

    return hmac.compare_digest((one or "").encode("utf-8"), (other or "").encode("utf-8"))


def refusal(ours: Hello, theirs: Hello, where: str) -> str | None:
    """Why the bridge saying `theirs` may not share the process that `ours` started; None: it may."""
    if theirs.identity != ours.identity:
        return f"this host's memory process serves another vault than {where}; {FIX}"
    differing = sorted({name for name, _ in set(ours.settings.items()) ^ set(theirs.settings.items())})
    if differing:
        # Named, never their values: the line reaches the host's log and its agent.
        described = ", ".join(differing) + (" differs" if len(differing) == 1 else " differ")
        return f"the memory process of {where} runs with other settings than this host's ({described}); {FIX}"
    if not _same(ours.passphrase, theirs.passphrase):
        return (
            f"this host's passphrase is not the one the memory process of {where} was unlocked with; "
            f"nothing was done: give every host of this vault the same passphrase, or {ON_ITS_OWN}"
        )
    return None


def answer(refused: str | None) -> bytes:
    """The process's reply line to a hello."""
    return json.dumps({"ok": True} if refused is None else {"refused": refused}).encode("utf-8") + b"\n"


class ChannelFailure(Exception):
    """The vault's channel could not be used: the line why (no secret, no path of a project)."""


def greet(channel: Channel, hello: Hello) -> tuple[socket.socket, IO[bytes]] | str | None:
    """Connect to the memory process on `channel` and say `hello`.

    The connection and its reader when the process took it; the line it was refused with;
    None when no process answered (none listens, or it ended between the connection and
    its answer). ChannelFailure when the channel cannot be used at all.
    """
    from squirrel_mcp.core.channel import PeerRefused

    try:
        connection = channel.connect()
    except PeerRefused as refused:
        raise ChannelFailure(f"the vault's channel is held by another user: {refused}") from None
    except OSError as error:
        raise ChannelFailure(f"the vault's channel could not be reached ({type(error).__name__})") from None
    if connection is None:
        return None
    reader = connection.makefile("rb")
    try:
        connection.sendall(hello.line())
        answered = reader.readline(MAX_HELLO)
        said = read_answer(answered) if answered else ""
    except (OSError, HelloError):
        said = ""
    if said is None:
        return connection, reader
    reader.close()
    connection.close()
    # "": the process ended (or is ending) between the connection and its answer: as if none ran.
    return said or None


def read_answer(line: bytes) -> str | None:
    """None when the process took the bridge; else the line it was refused with. HelloError: no answer."""
    try:
        message: Any = json.loads(line)
    except (ValueError, RecursionError):
        raise HelloError("not JSON") from None
    if isinstance(message, dict) and message.get("ok") is True:
        return None
    if isinstance(message, dict) and isinstance(message.get("refused"), str):
        return str(message["refused"])
    raise HelloError("no answer to the hello")


def page_answer(*, url: str | None = None, handoff: str | None = None, error: str | None = None) -> bytes:
    """The process's line once the page asked for listens (`url`, `handoff`), or why it cannot (`error`)."""
    message = {"error": error} if error is not None else {"url": url, "handoff": handoff}
    return json.dumps(message).encode("utf-8") + b"\n"


def read_page_answer(line: bytes) -> tuple[str, str | None]:
    """(the page's address, its hand-off file's URI or None); HelloError: no page, with the line why."""
    try:
        message: Any = json.loads(line) if line else None
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and isinstance(message.get("error"), str):
        raise HelloError(message["error"])
    if not isinstance(message, dict) or not isinstance(message.get("url"), str):
        raise HelloError("the memory process ended before the page listened")
    handoff = message.get("handoff")
    return message["url"], handoff if isinstance(handoff, str) else None


def hook_answer(*, text: str | None = None, error: str | None = None) -> bytes:
    """The process's line answering a hook: its `text` (None: nothing to say), or why it has none."""
    message = {"error": error} if error is not None else {"text": text}
    return json.dumps(message).encode("utf-8") + b"\n"


def read_hook_answer(line: bytes) -> str | None:
    """A hook's text (None: nothing to say); HelloError with the line why, when there is no answer."""
    try:
        message: Any = json.loads(line) if line else None
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and isinstance(message.get("error"), str):
        raise HelloError(message["error"])
    if not isinstance(message, dict) or "text" not in message:
        raise HelloError("the memory process ended before answering")
    text = message["text"]
    if text is not None and not isinstance(text, str):
        raise HelloError("the memory process's answer is not text")
    return text


def idle_seconds(value: str | None) -> float:
    """How long the process stays with no bridge, from SQUIRREL_MCP_SHARED_IDLE; ValueError if malformed."""
    if not value:
        return DEFAULT_IDLE
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < float("inf"):
        raise ValueError("SQUIRREL_MCP_SHARED_IDLE must be a number of seconds, 0 or more")
    return seconds
