"""Prompts nothing in a vault answers, for calibrating the prompt hook (scripts/calibrate_hooks.py).

What an agent's user types that asks nothing of the memory: coding requests, greetings and
thanks, follow-ups that lean on the conversation. Whatever the prompt hook would show for one
of them is noise. They were written before anything was measured and are not tuned to it.
"""

from __future__ import annotations

PROMPTS = (
    # Coding requests
    "fix the failing test in utils.py",
    "add type hints to the parser module",
    "why does this function return None?",
    "refactor this class into two smaller ones",
    "write a unit test for the login handler",
    "run the linter and fix what it reports",
    "rename the variable tmp to something clearer",
    "the build is broken on CI, can you look?",
    "add a --verbose flag to the command line",
    "make this loop faster",
    "explain what this regular expression matches",
    "convert this callback code to async/await",
    "the docker image is too big, shrink it",
    "add pagination to the /users endpoint",
    "what does this stack trace mean?",
    "bump the version to 2.3.1 and update the changelog",
    "write a SQL query that counts orders per customer",
    "remove the dead code in helpers.js",
    "the migration fails with a foreign key error",
    "squash these commits into one",
    "implement a binary search over the sorted list",
    "add logging to the retry loop",
    "set up GitHub Actions for this repo",
    "this React component re-renders too often",
    "parse the CSV and sum the third column",
    "why is mypy complaining about Optional here?",
    "add a README section on installation",
    "split this file into modules",
    "handle the timeout error gracefully",
    "generate a .gitignore for a Python project",
    # Greetings, thanks, small talk
    "hi",
    "hello there",
    "good morning!",
    "thanks!",
    "thank you, that worked",
    "great, perfect",
    "ok",
    "cool",
    "nice work",
    "bye for now",
    # Follow-ups that lean on the conversation, not on memory
    "what about the other one?",
    "yes, do it",
    "no, the second option",
    "continue",
    "try again",
    "can you explain that more simply?",
    "go ahead with the plan",
    "undo that last change",
    "and the same for the tests",
    "why did you do it that way?",
    "show me the diff",
    "that didn't work, same error",
    "keep going",
    "make it shorter",
    "now commit it",
    "what's next?",
    "looks good, ship it",
    "use tabs instead of spaces",
    "do the same in the other file",
    "revert it",
)
