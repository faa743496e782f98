"""Every job of the project, one nox session each.

    nox -s tests   ruff, mypy, every test and every gate (what .ci/run and the README run), side by
                   side (pytest-xdist); the sync server's tests get a throwaway PostgreSQL from
                   .ci/postgres
    nox -s lint    ruff, ruff format --check, mypy, the import contract of the layers (lint-imports):
                   the quick check before a commit
    nox -s unit    the tests that run in one interpreter: no model, no process, no PostgreSQL;
                   arguments go to pytest (`nox -s unit -- -k search`)
    nox -s recall  the recall gate: lexical vs hybrid on the recall corpus; docs/recall.md
    nox -s diagnose -- queries.json   recall on your own memories (ids, ranks, scores only)
    nox -s reliability  kills, concurrency, soak, fuzzing, tampering; table in docs/reliability.md
    nox -s fetch_model  the shipped model's checked files into the plugin (cached)
    nox -s demo    the real server over stdio on a throwaway vault, lexical and hybrid
    nox -s build   the sdists and wheels of both distributions into dist/, twine-checked
    nox -s bench   benchmark scripts; figures land in docs/benchmarks/
    nox -s lock    regenerate the hashed lock files in requirements/

Every session installs from the hashed lock files, then the two distributions
from this checkout without dependencies, so what runs is exactly what was locked.
The model is exported once per machine into a cache (model/fetch.py) that every
session reuses; only recall, reliability and bench rewrite the figures in docs/, and
`nox -s tests` fails if it changed any file of the working tree.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False
PYTHON = "3.11"
LOCK_FLAGS = [
    "--universal",
    "--generate-hashes",
    "--python-version",
    PYTHON,
    "--no-emit-package",
    "squirrel-mcp",
    "--no-emit-package",
    "squirrel-mcp-embeddings",
    "-q",
]
POSTGRES_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".ci", "postgres")
CHROMIUM_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".ci", "chromium")
KEYRING_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".ci", "keyring")
HAPROXY_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".ci", "haproxy")
TREE_STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "tree_state.py")
# model/fetch.py --cached-only's exit status when the cache has no checked export.
FETCH_NOT_CACHED = 3
# Set by the sessions that exist to measure: only they rewrite the figures in docs/
# (scripts/figure_pages.py); a test run writes its pages under build/.
PUBLISH_FIGURES = {"SQUIRREL_WRITE_FIGURES": "1"}


def install_project(session: nox.Session, *locks: str) -> None:
    """The locked dependencies (hashes required), then both distributions from this checkout."""
    for lock in locks:
        session.install("--require-hashes", "-r", lock)
    session.install("--no-deps", "--no-build-isolation", ".", "./embeddings_plugin")


def fetch_model_files(session: nox.Session, *args: str, with_torch: bool = False) -> None:
    """The model's checked files into the plugin, from this machine's export cache when it has them.

    The export (torch, transformers: over a gigabyte of environment) runs once per machine:
    `model/fetch.py --cached-only` needs nothing but Python and copies a checked export from
    the cache; only when the cache has none are the export's tools installed and the export
    made (and cached). `with_torch` installs them in any case (the tests session's reference
    check computes vectors in torch).
    """
    if not with_torch:
        python = shutil.which("python", path=session.bin)
        cached = subprocess.run([python or "python", "model/fetch.py", "--cached-only", *args], check=False)
        if cached.returncode == 0:
            return
        if cached.returncode != FETCH_NOT_CACHED:
            session.error("model/fetch.py refused the model (see above)")
        session.log("no checked export in the cache yet: installing torch to export the model once")
    session.install("--require-hashes", "-r", "requirements/fetch.txt")
    # torch is pinned by version, not hash: this machine's disk holds its CPU build
    # (2.13.0+cpu), which a hash lock resolved against the index cannot name, and the
    # index's torch pulls gigabytes of CUDA. Its dependencies are in fetch.txt, hence
    # --no-deps. The export it makes is itself pinned by SHA-256 in the manifest.
    session.install("--no-deps", "torch==2.13.0")
    session.run("python", "model/fetch.py", *args)


@nox.session(python=PYTHON)
def fetch_model(session: nox.Session) -> None:
    """Fetch, export and check the shipped model (quick when ~/.cache/squirrel-mcp-build has it)."""
    fetch_model_files(session, *session.posargs)


@contextmanager
def postgres_for_tests(session: nox.Session) -> Iterator[None]:
    """A throwaway PostgreSQL (.ci/postgres) for the sync server's tests, stopped afterwards.

    A cluster named by SQUIRREL_TEST_POSTGRES_URL is used as it is. Without one,
    and where none can be started (not root, PostgreSQL not installed), the
    PostgreSQL halves of the sync tests are skipped, saying so, unless
    SQUIRREL_TEST_POSTGRES_REQUIRED=1 (set by .ci/run), which makes it an error.
    """
    if os.environ.get("SQUIRREL_TEST_POSTGRES_URL"):
        yield
        return
    started = subprocess.run([POSTGRES_SCRIPT, "start"], stdout=subprocess.PIPE, text=True, check=False)
    if started.returncode != 0:
        if os.environ.get("SQUIRREL_TEST_POSTGRES_REQUIRED") == "1":
            session.error("could not start PostgreSQL for the sync tests (.ci/postgres start failed)")
        session.warn("no PostgreSQL for the sync tests: their PostgreSQL halves will be skipped")
        yield
        return
    exported = {}
    for line in started.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        exported[name] = shlex.split(value)[0]
    session.env.update(exported)
    try:
        yield
    finally:
        subprocess.run([POSTGRES_SCRIPT, "stop", exported["SQUIRREL_TEST_POSTGRES_DIR"]], check=False)


@contextmanager
def system_packages_installing() -> Iterator[None]:
    """Debian's chromium, GNOME Keyring, PostgreSQL and haproxy installed (where missing) meanwhile.

    As root only, with apt-get; SQUIRREL_TEST_SYSTEM_PACKAGES=0 installs nothing (the tests
    that need a missing one then skip, saying so, unless .ci/run's *_REQUIRED makes it an error).

    apt and pip share nothing, so the minute apt takes overlaps the Python set-up. This only
    installs: chromium_for_tests, keyring_for_tests and postgres_for_tests afterwards check them as
    always (and say what is wrong if this failed); the load test checks haproxy itself. Its output
    goes to build/system-packages.log.
    """
    if os.environ.get("SQUIRREL_TEST_SYSTEM_PACKAGES") == "0":
        yield  # the checks afterwards say what is missing; those tests skip
        return
    log_path = Path("build") / "system-packages.log"
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        installing = subprocess.Popen(
            [
                "/bin/bash",
                "-c",
                f"{shlex.quote(CHROMIUM_SCRIPT)}; {shlex.quote(KEYRING_SCRIPT)}; "
                f"{shlex.quote(POSTGRES_SCRIPT)} install; {shlex.quote(HAPROXY_SCRIPT)}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield
        finally:
            installing.wait()


def chromium_for_tests(session: nox.Session) -> None:
    """Debian's chromium for the browser test (.ci/chromium); without it that test skips, saying why.

    Unless SQUIRREL_TEST_BROWSER_REQUIRED=1 (set by .ci/run): then a missing browser is an error.
    """
    if subprocess.run([CHROMIUM_SCRIPT], check=False).returncode == 0:
        return
    if os.environ.get("SQUIRREL_TEST_BROWSER_REQUIRED") == "1":
        session.error("could not install chromium for the browser test (.ci/chromium failed)")
    session.warn("no chromium for the browser test: it will be skipped")


def keyring_for_tests(session: nox.Session) -> None:
    """Debian's gnome-keyring and dbus for the keychain tests (.ci/keyring); without them they skip.

    Unless SQUIRREL_TEST_KEYRING_REQUIRED=1 (set by .ci/run): then a missing keyring is an error.
    The tests start their own D-Bus session and keyring daemon.
    """
    if subprocess.run([KEYRING_SCRIPT], check=False).returncode == 0:
        return
    if os.environ.get("SQUIRREL_TEST_KEYRING_REQUIRED") == "1":
        session.error("could not install gnome-keyring and dbus for the keychain tests (.ci/keyring failed)")
    session.warn("no gnome-keyring for the keychain tests: they will be skipped")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Lint, type-check and run every test (the model is fetched first, so its tests run).

    Ends by checking that the run left the working tree as it found it (scripts/tree_state.py).
    """
    tree_before = subprocess.run(
        [sys.executable, TREE_STATE, "snapshot"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    with system_packages_installing():
        session.install("--require-hashes", "-r", "requirements/dev.txt")
        # torch only where the reference check must run (SQUIRREL_TEST_TORCH_REQUIRED=1, set by
        # .ci/run) or the cache has no export yet; elsewhere that one test skips, saying so.
        fetch_model_files(session, with_torch=os.environ.get("SQUIRREL_TEST_TORCH_REQUIRED") == "1")
        install_project(session)
        run_lint(session)
    chromium_for_tests(session)
    keyring_for_tests(session)
    with postgres_for_tests(session), reliability_report(session):
        # Side by side, a module per worker: the tests mostly wait on the processes they
        # start, so four workers keep two cores busy. The recall gate and the reliability
        # checks are tests of this run; every loop in them is bounded by count and time, the
        # timeout is a backstop.
        side_by_side = ("-n", "4", "--dist", "loadfile", "--reliability", "--timeout=1500")
        if not session.posargs:
            # First the tests that start a server as a host does, each host with a server of its
            # own (SQUIRREL_MCP_SHARED=0; the wheel and venv builds aside); then every test with
            # the product's default, each host a bridge to the vault's one memory process (the
            # reliability figures written are that run's).
            session.run(
                *("pytest", *side_by_side, "--hosts-only", "-m", "not slow", "--durations=10"),
                env={"SQUIRREL_TEST_SHARED": "0"},
            )
        session.run("pytest", *side_by_side, "--durations=30", *session.posargs)
    left = subprocess.run([sys.executable, TREE_STATE, "compare"], input=tree_before, text=True, check=False)
    if left.returncode != 0:
        session.error("the test run changed the working tree (the files are named above)")


def run_lint(session: nox.Session) -> None:
    """Ruff's rules and format, mypy strict on both packages, and the layers' import contract."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    # [tool.importlinter] in pyproject.toml, over this checkout's sources (not an installed copy).
    session.run("lint-imports", env={"PYTHONPATH": "base:embeddings_plugin"})


@nox.session(python=PYTHON, reuse_venv=True)
def lint(session: nox.Session) -> None:
    """What `nox -s tests` lints, alone (its environment is kept between runs)."""
    session.install("--require-hashes", "-r", "requirements/dev.txt")
    install_project(session)
    run_lint(session)


@nox.session(python=PYTHON, reuse_venv=True)
def unit(session: nox.Session) -> None:
    """The tests that need no model, no process and no PostgreSQL (the others skip, saying so).

    Arguments are passed to pytest. Where a test would start a process (a server, a CLI,
    the sync server) or needs the model, tests/conftest.py skips it; `nox -s tests` runs
    everything.
    """
    session.install("--require-hashes", "-r", "requirements/dev.txt")
    # The plugin's build refuses to run without the fetched model, and these tests never
    # load it: its package is imported from the checkout instead of installed.
    session.install("--no-deps", "--no-build-isolation", ".")
    session.env["PYTHONPATH"] = "embeddings_plugin"
    session.env["SQUIRREL_TEST_UNIT"] = "1"
    session.env.pop("SQUIRREL_TEST_POSTGRES_URL", None)
    session.run("pytest", "-q", *session.posargs)


def run_recall(session: nox.Session) -> None:
    """The recall gate, in a session that has the model and both distributions installed."""
    session.run("python", "-m", "tests.recall.gate")


@nox.session(python=PYTHON)
def recall(session: nox.Session) -> None:
    """Lexical vs hybrid recall on the recall corpus with the real model; fails below the gate."""
    fetch_model_files(session)
    install_project(session, "requirements/runtime.txt", "requirements/build.txt")
    session.env.update(PUBLISH_FIGURES)
    run_recall(session)


@nox.session(python=PYTHON, reuse_venv=True)
def diagnose(session: nox.Session) -> None:
    """Where the memories you expect rank for your own queries: `nox -s diagnose -- queries.json`.

    An installed `squirrel-mcp` that has the diagnostic (pipx install
    "squirrel-mcp[embeddings]") is run as it is. Otherwise this checkout is installed
    into the session's own virtual environment, made once and reused afterwards.
    """
    installed = shutil.which("squirrel-mcp")
    if installed is not None and has_diagnose(installed):
        session.log(f"using the installed {installed}")
        session.run(installed, "diagnose", *session.posargs, external=True)
        return
    fetch_model_files(session)
    install_project(session, "requirements/runtime.txt", "requirements/build.txt")
    session.run("squirrel-mcp", "diagnose", *session.posargs)


def has_diagnose(script: str) -> bool:
    """Whether this `squirrel-mcp` has the embeddings plugin's `diagnose` subcommand."""
    probe = subprocess.run([script, "diagnose", "--help"], capture_output=True, check=False, timeout=120)
    return probe.returncode == 0


@contextmanager
def reliability_report(session: nox.Session) -> Iterator[None]:
    """Around a run of the reliability checks (tests/reliability): their table afterwards.

    Each check writes its figures to build/reliability/; the report turns this run's
    figures into docs/reliability.md, also when a check failed (its row shows what).
    """
    shutil.rmtree("build/reliability", ignore_errors=True)
    try:
        yield
    finally:
        if any(Path("build/reliability").glob("*.json")):
            session.run("python", "scripts/reliability_report.py")
        else:  # `nox -s tests -- some/tests.py`: no check ran, so there is no table to write
            session.log("no reliability check ran: no reliability table written")


def run_reliability(session: nox.Session) -> None:
    """The reliability checks alone (tests/reliability, left out of a plain pytest), then their table."""
    with reliability_report(session):
        # Every loop in these checks is bounded by count and time; the timeout is a backstop.
        session.run("pytest", "tests/reliability", "--timeout=900", "--durations=0")


@nox.session(python=PYTHON)
def reliability(session: nox.Session) -> None:
    """Kill -9 mid-write, two servers on one vault, a soak, fuzzing, tampering: docs/reliability.md."""
    session.install("--require-hashes", "-r", "requirements/dev.txt")
    # The model too, so any check that starts the real embeddings plugin has it.
    fetch_model_files(session)
    install_project(session)
    session.env.update(PUBLISH_FIGURES)
    run_reliability(session)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """Save memories into a throwaway vault through the real server; search them lexical and hybrid."""
    # The model first, so the plugin installed next carries it and the hybrid side runs.
    fetch_model_files(session)
    install_project(session, "requirements/runtime.txt", "requirements/build.txt")
    session.run("python", "scripts/demo.py")


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    """The sdists and wheels of both distributions into dist/, checked by twine."""
    session.install("--require-hashes", "-r", "requirements/dev.txt")
    fetch_model_files(session)
    build_distributions(session, "dist")


def build_distributions(session: nox.Session, outdir: str) -> None:
    """Each distribution's sdist, then its wheel built from that sdist; `twine check --strict`."""
    shutil.rmtree(outdir, ignore_errors=True)
    for source in (".", "embeddings_plugin"):
        session.run("python", "-m", "build", "--no-isolation", "--outdir", outdir, source)
    session.run("twine", "check", "--strict", *sorted(str(p) for p in Path(outdir).iterdir()))


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks, run side by side; each writes its figures to docs/benchmarks/."""
    fetch_model_files(session)
    install_project(session, "requirements/dev.txt")
    session.env.update(PUBLISH_FIGURES)
    session.run("python", "scripts/bench_startup.py", *session.posargs)
    session.run("python", "scripts/bench_listing.py")
    session.run("python", "scripts/bench_duplicates.py")
    session.run("python", "scripts/bench_search.py")
    session.run("python", "scripts/bench_search.py", "--crafted")
    session.run("python", "scripts/bench_hybrid.py")
    session.run("python", "scripts/bench_projects.py")
    session.run("python", "scripts/bench_embed.py")
    session.run("python", "scripts/bench_warmup.py")
    # Long memories read whole (passages): the gain on tests/data/long_memories.json and the cost.
    # The published table also has the build before passages (`--baseline PYTHON`, by hand).
    session.run("python", "scripts/bench_long_memories.py")
    session.run("python", "scripts/bench_shared.py")
    session.run("python", "scripts/bench_hooks.py")
    session.run("python", "scripts/bench_vault_look.py")
    # The prompt hook's confidence rule, on LoCoMo (when there) and prompts: docs/benchmarks/hooks.md.
    session.run("python", "scripts/calibrate_hooks.py")
    # LoCoMo, when its conversations are there (SQUIRREL_LOCOMO_DATA or ../shared/data/locomo).
    session.run("python", "scripts/bench_locomo.py")
    # LongMemEval, when its questions are there (SQUIRREL_LONGMEMEVAL_DATA or ../shared/data/longmemeval).
    session.run("python", "scripts/bench_longmemeval.py")
    subprocess.run([HAPROXY_SCRIPT], check=True)
    with postgres_for_tests(session):
        # Side by side with the server of 1fdee83, the last commit before the sync server's
        # appends were batched and its round trips cut (docs/benchmarks/sync.md says so too).
        session.run("python", "scripts/bench_sync.py", "--baseline", "1fdee83")
        session.run("python", "scripts/bench_sync_scale.py")


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Regenerate requirements/*.txt from requirements/*.in (needs the package index)."""
    session.install("uv")
    for name in ("runtime", "build", "dev", "nox", "fetch"):
        session.run(
            "uv", "pip", "compile", *LOCK_FLAGS, f"requirements/{name}.in", "-o", f"requirements/{name}.txt"
        )
