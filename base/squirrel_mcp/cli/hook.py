"""`squirrel-mcp hook EVENT --host HOST`: what an agent's host runs at a session's start and each prompt.

And before it compacts the context. The host (Claude Code, Codex, Gemini CLI) writes its
JSON on this command's stdin and reads its stdout. Each of them sends the session's
working directory as `cwd`; at a prompt, the prompt's text as `prompt` (Claude Code's and
Codex's UserPromptSubmit, Gemini CLI's BeforeAgent). Their other fields (the session's
id, the transcript's path, the start's `source` or `trigger`) are not read: this command
never reads the transcript.

- `session-start`: the session project's get_context, within SQUIRREL_HOOK_CONTEXT_BUDGET
  characters (4000 by default), with a line on how to reach what it leaves out.
- `prompt`: the memories the ranking is confident in for the prompt (server/confidence.py),
  at most 5, within SQUIRREL_HOOK_RECALL_BUDGET characters (1500); none: nothing is printed.
- `pre-compact`: a fixed reminder to save what lasts before the context is cut; the vault is
  not opened.

The texts come from the vault's memory process (squirrel_mcp.cli.hook_answers), reached over
the local channel as a host's bridge reaches it: started when none runs and the passphrase
is in the environment or the keychain; else a running one answers a hook of this user's
without a passphrase (docs/security.md says what that admits). No MCP session, no plugin and
no vault is loaded here, so a hook starts in tens of milliseconds.

Whatever happens, the exit status is 0 (a host may take another status as a refusal of the
prompt): a malformed input, a vault that cannot be reached or unlocked, or an answer later
than SQUIRREL_HOOK_DEADLINE seconds (2 by default) prints nothing on stdout and one line on
stderr, which never holds the prompt, a memory, the project or a secret.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from squirrel_mcp.cli.hook_asking import Silent
from squirrel_mcp.core.hello import MAX_HOOK_BUDGET

EVENTS = ("session-start", "prompt", "pre-compact")
HOSTS = ("claude-code", "codex", "gemini")
# The longest input read: a host's JSON holds a prompt and a few paths; anything longer is no host's.
MAX_INPUT = 1 << 20
MAX_CWD = 4096
CONTEXT_BUDGET = ("SQUIRREL_HOOK_CONTEXT_BUDGET", 4000)
RECALL_BUDGET = ("SQUIRREL_HOOK_RECALL_BUDGET", 1500)
DEADLINE = ("SQUIRREL_HOOK_DEADLINE", 2.0)
# What each host calls the event, in the `hookEventName` of its output: Claude Code and Codex
# take the names they sent; Gemini CLI calls a prompt's event BeforeAgent.
EVENT_NAMES = {
    ("session-start", "claude-code"): "SessionStart",
    ("session-start", "codex"): "SessionStart",
    ("session-start", "gemini"): "SessionStart",
    ("prompt", "claude-code"): "UserPromptSubmit",
    ("prompt", "codex"): "UserPromptSubmit",
    ("prompt", "gemini"): "BeforeAgent",
}
# Before a compaction. Claude Code takes a PreCompact hook's plain stdout as instructions to the
# summary it writes (its PreCompact accepts no additionalContext); Codex's PreCompact and Gemini
# CLI's PreCompress take none either, and show a `systemMessage` to the user.
SUMMARY_REMINDER = (
    "Keep in the summary, each on a line of its own, every lasting fact about the user, their "
    "preferences or this project, and every correction the user made, that this session has not "
    "yet saved to squirrel-mcp's memory (save_memory, or update_memory for a correction), so that "
    "they can still be saved after the compaction."
)
USER_REMINDER = (
    "squirrel-mcp: the context is being compacted; if this session taught lasting facts or "
    "corrections, ask the agent to save them (save_memory, update_memory)."
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse exits 2, which a host may read as "block this prompt".
        self.exit(0, f"squirrel-mcp hook: {message}\n")


def main(arguments: Sequence[str]) -> int:
    """Run the hook for its host; 0 whatever happens (see the module's docstring)."""
    parser = _Parser(
        prog="squirrel-mcp hook",
        description="What an agent's host runs at a session's start, at each prompt and before a compaction.",
    )
    parser.add_argument("event", choices=EVENTS)
    parser.add_argument("--host", required=True, choices=HOSTS)
    args = parser.parse_args(arguments)
    env = dict(os.environ)
    disarm = _arm(_number(env, *DEADLINE))
    try:
        given = _read_input(sys.stdin.buffer)
        output = _output(args.event, args.host, env, given)
    except Silent as silent:
        output = None
        _say(str(silent))
    except Exception as error:  # a bug's: said by its type alone (its text may hold the input), exit 0
        output = None
        _say(f"failed ({type(error).__name__}); nothing was added")
    finally:
        # Disarmed before anything is printed: the output is whole, or it is not there.
        disarm()
    if output:
        try:
            sys.stdout.buffer.write(output.encode("utf-8"))
            sys.stdout.flush()
        except OSError:
            pass  # the host stopped reading: it has gone, nothing is left to tell it
    return 0


def _say(line: str) -> None:
    sys.stderr.write(f"squirrel-mcp hook: {line}\n")
    sys.stderr.flush()


def _arm(deadline: float) -> Callable[[], None]:
    """After `deadline` seconds, end with one line and nothing on stdout, whatever this process is doing.

    A timer signal where there is one (it interrupts a blocking read as a thread cannot), else
    a timer thread. Returns what disarms it.
    """

    def late(*_ignored: object) -> None:
        _say(f"no answer within {deadline:g} s ({DEADLINE[0]}); nothing was added")
        os._exit(0)

    if hasattr(signal, "setitimer"):
        signal.signal(signal.SIGALRM, late)
        signal.setitimer(signal.ITIMER_REAL, deadline)

        def disarm() -> None:
            signal.setitimer(signal.ITIMER_REAL, 0)

        return disarm
    import threading

    timer = threading.Timer(deadline, late)
    timer.daemon = True
    timer.start()
    return timer.cancel


def _number(env: dict[str, str], name: str, default: float) -> Any:
    """The setting `name` (whole where `default` is); `default`, said on stderr, when malformed."""
    value = env.get(name)
    if not value:
        return default
    # A budget travels in the hook's request, which the memory process bounds.
    most = MAX_HOOK_BUDGET if isinstance(default, int) else float("inf")
    try:
        number = type(default)(value)
    except ValueError:
        number = None
    if number is None or not 0 < number <= most or number == float("inf"):
        bound = "" if most == float("inf") else f" and at most {most}"
        _say(f"{name} must be a number above 0{bound}; {default:g} is used")
        return default
    return number


def _read_input(stream: Any) -> dict[str, Any]:
    """The host's JSON object; Silent when the input is too long or not one."""
    data = stream.read(MAX_INPUT + 1)
    if len(data) > MAX_INPUT:
        raise Silent(f"the host's input is longer than {MAX_INPUT} bytes; nothing was added")
    try:
        given = json.loads(data)
    except (ValueError, RecursionError):
        raise Silent("the host's input is not JSON; nothing was added") from None
    if not isinstance(given, dict):
        raise Silent("the host's input is not a JSON object; nothing was added")
    return given


def _cwd(given: dict[str, Any]) -> Path:
    """The session's working directory: the input's `cwd` (this process's own when none is given)."""
    cwd = given.get("cwd")
    if cwd is None:
        return Path.cwd()
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or len(cwd) > MAX_CWD or "\0" in cwd:
        raise Silent("the host's `cwd` is not an absolute path; nothing was added")
    return Path(cwd)


def _output(event: str, host: str, env: dict[str, str], given: dict[str, Any]) -> str | None:
    """What to print for `event` in `host`'s format; None: nothing."""
    if event == "pre-compact":
        if host == "claude-code":
            return SUMMARY_REMINDER
        return json.dumps({"systemMessage": USER_REMINDER})
    prompt = None
    if event == "prompt":
        prompt = given.get("prompt")
        if not isinstance(prompt, str):
            raise Silent("the host's input has no `prompt` text; nothing was added")
        if not prompt.strip():
            return None
    from squirrel_mcp.cli.hook_asking import ask

    budget = _number(env, *(CONTEXT_BUDGET if event == "session-start" else RECALL_BUDGET))
    text = ask(env, _cwd(given), event, budget, prompt)
    if text is None:
        return None
    name = EVENT_NAMES[event, host]
    return json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}})
