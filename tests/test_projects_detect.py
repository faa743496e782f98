"""Where a host's session stands: SQUIRREL_PROJECT, or the working directory and its git repository.

The repositories are real ones made with the `git` CLI (worktrees, clones, submodules, bare ones),
and where git's config syntax is in question git itself says what a config holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from squirrel_mcp.core.projects import (
    PROJECT_VARIABLE,
    ProjectError,
    normalise_remote,
    project_name,
    repository_identity,
    session_project,
)

Git = Callable[..., str]

needs_git = pytest.mark.skipif(
    shutil.which("git") is None, reason="the git CLI is not installed: these tests make real repositories"
)


@pytest.fixture
def git_env(tmp_path: Path) -> dict[str, str]:
    """An environment for the test's git commands: none of this machine's git config leaks in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    (tmp_path / "git-home").mkdir()
    env.update(
        HOME=str(tmp_path / "git-home"),
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    return env


@pytest.fixture
def git(git_env: dict[str, str]) -> Git:
    """Run git in a directory: git(cwd, "worktree", "add", ...) -> its stdout."""

    def run(cwd: Path, *args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
            cwd=cwd,
            env=git_env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def make_repo(git: Git, path: Path, origin: str | None = None) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README").write_text("hello\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("")
    git(path, "add", ".")
    git(path, "commit", "-qm", "first")
    if origin is not None:
        git(path, "remote", "add", "origin", origin)
    return path


def no_home(tmp_path: Path) -> Path:
    return tmp_path / "someone-else"


# --- repositories ---------------------------------------------------------------------------------


@needs_git
def test_scp_remote_names_the_repository_from_anywhere_in_its_work_tree(git: Git, tmp_path: Path) -> None:
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    assert repository_identity(api) == "github.com/acme/api"
    assert repository_identity(api / "src") == "github.com/acme/api"
    assert session_project({}, api / "src", no_home(tmp_path)) == "github.com/acme/api"


@needs_git
def test_https_remote_keeps_none_of_its_credentials(git: Git, tmp_path: Path) -> None:
    url = "https://deploy-user:s3cr3t-t0ken@GitLab.Example.com:8443/team/web.git"
    web = make_repo(git, tmp_path / "web", url)
    assert "s3cr3t-t0ken" in (web / ".git" / "config").read_text()  # the credentials are there to leak
    identity = session_project({}, web, no_home(tmp_path))
    assert identity == "gitlab.example.com/team/web"
    for part in ("s3cr3t", "t0ken", "deploy-user", "8443"):
        assert part not in identity
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    assert repository_identity(api) != identity


@needs_git
def test_a_clone_is_the_same_project_whichever_form_its_url_takes(git: Git, tmp_path: Path) -> None:
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    git(tmp_path, "clone", "-q", str(api), "elsewhere/api-clone")
    clone = tmp_path / "elsewhere" / "api-clone"
    # As cloned, its origin is the first checkout's folder: a different project until it points
    # where the first one does, in another spelling of the same URL.
    assert repository_identity(clone) == str(api.resolve())
    git(clone, "remote", "set-url", "origin", "https://github.com/acme/api")
    assert repository_identity(clone / "src") == repository_identity(api) == "github.com/acme/api"


@needs_git
def test_a_clone_of_a_repository_without_a_remote_is_that_repository(git: Git, tmp_path: Path) -> None:
    local = make_repo(git, tmp_path / "local")
    assert repository_identity(local) == str(local.resolve())
    git(tmp_path, "clone", "-q", str(local), "copy")
    assert repository_identity(tmp_path / "copy") == str(local.resolve())


@needs_git
def test_a_linked_worktree_is_its_main_checkouts_project(git: Git, tmp_path: Path) -> None:
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    git(api, "worktree", "add", "-q", str(tmp_path / "trees" / "feature"))
    feature = tmp_path / "trees" / "feature"
    assert (feature / ".git").is_file()
    assert repository_identity(feature) == "github.com/acme/api"
    assert session_project({}, feature / "src", no_home(tmp_path)) == "github.com/acme/api"


@needs_git
def test_a_repository_without_a_remote_is_its_main_worktree_in_every_worktree(
    git: Git, tmp_path: Path
) -> None:
    local = make_repo(git, tmp_path / "local")
    git(local, "worktree", "add", "-q", str(tmp_path / "wt"))
    assert repository_identity(local / "src") == str(local.resolve())
    assert repository_identity(tmp_path / "wt" / "src") == str(local.resolve())


@needs_git
def test_a_relative_local_remote_is_read_against_the_main_worktree(git: Git, tmp_path: Path) -> None:
    make_repo(git, tmp_path / "upstream")
    repo = make_repo(git, tmp_path / "repo", "../upstream/.git")
    git(repo, "worktree", "add", "-q", str(tmp_path / "far" / "away" / "wt"))
    expected = str((tmp_path / "upstream").resolve())
    assert repository_identity(repo) == expected
    assert repository_identity(tmp_path / "far" / "away" / "wt") == expected


@needs_git
def test_a_submodule_is_its_own_project(git: Git, tmp_path: Path) -> None:
    library = make_repo(git, tmp_path / "library")
    app = make_repo(git, tmp_path / "app", "git@github.com:acme/app.git")
    git(app, "submodule", "add", "-q", str(library), "vendor/library")
    sub = app / "vendor" / "library"
    assert (sub / ".git").is_file()
    assert repository_identity(sub / "src") == str(library.resolve())  # its origin: the library
    assert repository_identity(app / "vendor") == "github.com/acme/app"
    # Without a remote the submodule's own folder, from its config's core.worktree: not the
    # superproject's .git/modules/ where its git directory lives.
    git(sub, "remote", "remove", "origin")
    git(sub, "worktree", "add", "-q", str(tmp_path / "library-wt"))
    assert repository_identity(sub / "src") == str(sub.resolve())
    assert repository_identity(tmp_path / "library-wt") == str(sub.resolve())


@needs_git
def test_a_separate_git_dir_repository_is_one_project_in_all_its_worktrees(git: Git, tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    git(tmp_path, "init", "-q", "--separate-git-dir", str(tmp_path / "store" / "repo.git"), "main")
    main = tmp_path / "main"
    (main / "f").write_text("x")
    git(main, "add", ".")
    git(main, "commit", "-qm", "first")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    identity = repository_identity(main)
    assert identity == str((tmp_path / "store" / "repo").resolve())
    assert repository_identity(tmp_path / "wt") == identity
    git(main, "remote", "add", "origin", "git@github.com:acme/split.git")
    assert repository_identity(tmp_path / "wt") == repository_identity(main) == "github.com/acme/split"


@needs_git
def test_a_bare_repository_has_no_work_tree_but_its_worktrees_share_one_project(
    git: Git, tmp_path: Path
) -> None:
    source = make_repo(git, tmp_path / "source")
    git(tmp_path, "clone", "-q", "--bare", str(source), "api.git")
    bare = tmp_path / "api.git"
    git(bare, "remote", "remove", "origin")
    assert repository_identity(bare) is None
    git(bare, "worktree", "add", "-q", str(tmp_path / "one"))
    git(bare, "worktree", "add", "-q", "-b", "other", str(tmp_path / "two"))
    assert repository_identity(tmp_path / "one") == str((tmp_path / "api").resolve())
    assert repository_identity(tmp_path / "two" / "src") == repository_identity(tmp_path / "one")
    # Inside the bare repository itself there is no work tree: it is a folder like any other.
    assert session_project({}, bare / "refs", no_home(tmp_path)) == str((bare / "refs").resolve())
    # Nor is there one in a folder whose `.git` names the bare repository itself.
    (tmp_path / "pointing").mkdir()
    (tmp_path / "pointing" / ".git").write_text(f"gitdir: {bare}\n")
    assert repository_identity(tmp_path / "pointing") is None
    git(bare, "config", "core.bare", "false")  # now as if made with --separate-git-dir
    assert repository_identity(tmp_path / "pointing") == repository_identity(tmp_path / "one")


# --- directories ----------------------------------------------------------------------------------


def test_a_plain_folder_is_its_resolved_path(tmp_path: Path) -> None:
    folder = tmp_path / "notes" / "2026"
    folder.mkdir(parents=True)
    assert repository_identity(folder) is None
    assert session_project({}, folder / ".." / "2026", no_home(tmp_path)) == str(folder.resolve())


@needs_git
def test_a_symlinked_folder_is_where_it_leads(git: Git, tmp_path: Path) -> None:
    real = tmp_path / "real" / "folder"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    assert session_project({}, tmp_path / "link", no_home(tmp_path)) == str(real.resolve())
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    (tmp_path / "into-repo").symlink_to(api / "src")
    assert session_project({}, tmp_path / "into-repo", no_home(tmp_path)) == "github.com/acme/api"


@needs_git
def test_the_home_directory_is_no_project_even_as_a_repository(git: Git, tmp_path: Path) -> None:
    home = make_repo(git, tmp_path / "home", "git@github.com:me/dotfiles.git")
    assert repository_identity(home) == "github.com/me/dotfiles"
    assert session_project({}, home, home) is None
    (tmp_path / "to-home").symlink_to(home)
    assert session_project({}, tmp_path / "to-home", home) is None


@needs_git
def test_below_a_dotfiles_home_each_folder_stands_for_itself(git: Git, tmp_path: Path) -> None:
    home = make_repo(git, tmp_path / "home", "git@github.com:me/dotfiles.git")
    (home / "notes").mkdir()
    api = make_repo(git, home / "code" / "api", "git@github.com:acme/api.git")
    assert session_project({}, home / "notes", home) == str((home / "notes").resolve())
    assert session_project({}, api / "src", home) == "github.com/acme/api"


def test_home_defaults_to_the_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert session_project({}, tmp_path) is None
    (tmp_path / "work").mkdir()
    assert session_project({}, tmp_path / "work") == str((tmp_path / "work").resolve())


def test_the_filesystem_root_is_no_project(tmp_path: Path) -> None:
    assert session_project({}, Path("/"), no_home(tmp_path)) is None
    assert session_project({}, Path("/tmp/.."), no_home(tmp_path)) is None


def test_a_path_too_long_to_name_a_project_asks_for_the_variable(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["secret-folder-" + "d" * 186] * 6)
    deep.mkdir(parents=True)
    assert len(str(deep.resolve())) > 1000
    with pytest.raises(ProjectError, match=PROJECT_VARIABLE) as error:
        session_project({}, deep, no_home(tmp_path))
    assert "secret-folder" not in "".join(traceback.format_exception(error.value))
    assert session_project({PROJECT_VARIABLE: "deep"}, deep, no_home(tmp_path)) == "deep"


# --- SQUIRREL_PROJECT -----------------------------------------------------------------------------


@needs_git
def test_the_variable_wins_over_the_directory(git: Git, tmp_path: Path) -> None:
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    assert session_project({PROJECT_VARIABLE: "  billing  "}, api, no_home(tmp_path)) == "billing"
    assert session_project({PROJECT_VARIABLE: ""}, api, no_home(tmp_path)) is None
    assert session_project({PROJECT_VARIABLE: " \t "}, api, no_home(tmp_path)) is None
    assert session_project({"OTHER": "x"}, api, no_home(tmp_path)) == "github.com/acme/api"


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("*", "every project"),
        ("secret-first\nsecret-second", "single line"),
        ("secret-" + "x" * 994, "at most 1000"),
        ("secret-\x07bell", "control characters"),
    ],
)
def test_a_variable_that_cannot_name_a_project_is_refused_without_its_value(
    value: str, rule: str, tmp_path: Path
) -> None:
    with pytest.raises(ProjectError, match=rule) as error:
        session_project({PROJECT_VARIABLE: value}, tmp_path, no_home(tmp_path))
    told = "".join(traceback.format_exception(error.value))
    assert PROJECT_VARIABLE in str(error.value)
    assert "secret" not in told


def test_a_project_name_is_stripped_and_checked() -> None:
    assert project_name("  api  ") == "api"
    assert project_name("") is None
    assert project_name("   ") is None
    assert project_name("p" * 1000) == "p" * 1000
    for bad in ("*", "p" * 1001, "a\nb", "a\rb"):
        with pytest.raises(ProjectError, match="project's name"):
            project_name(bad)


# --- what git's files may hold --------------------------------------------------------------------

CONFIGS = {
    "quoted subsection, keys in any case": '[Remote "origin"]\n\tURL = git@h.example:a/b.git\n',
    "legacy subsection": "[remote.origin]\n\turl = git@h.example:legacy/b\n",
    "legacy subsection in capitals": "[remote.ORIGIN]\n\turl = git@h.example:legacy/c\n",
    "subsection in another case is another remote": '[remote "Origin"]\n\turl = git@h.example:x/y\n',
    "the last url wins": '[remote "origin"]\n\turl = git@h.example:a/1\n\turl = git@h.example:a/2\n',
    "quotes and comments": '[remote "origin"] # c\n\turl = "git@h.example:a/b;c" ; comment\n',
    "a continued line": '[remote "origin"]\n\turl = git@h.example:a/\\\nb\n',
    "escapes": '[remote "origin"]\n\turl = "git@h.example:a/\\"q\\"\\\\"\n',
    "a tab escape": '[remote "origin"]\n\turl = git@h.example:a/x\\ty\n',
    "unknown escape": '[remote "origin"]\n\turl = git@h.example:a/\\q\n',
    "unterminated quote": '[remote "origin"]\n\turl = "git@h.example:a/b\n',
    "a key on the header's line": '[remote "origin"] url = git@h.example:same/line\n',
    "a key without a value": '[remote "origin"]\n\turl\n',
    "a broken header": '[remote "origin\n\turl = git@h.example:a/b\n',
    "another section's url": '[remote "upstream"]\n\turl = git@h.example:up/b\n',
}


@needs_git
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_config_reads_as_git_reads_it(name: str, git: Git, tmp_path: Path) -> None:
    repo = make_repo(git, tmp_path / "repo")
    config = repo / ".git" / "config"
    config.write_text(config.read_text() + CONFIGS[name])
    try:
        url: str | None = git(repo, "config", "--file", str(config), "--get", "remote.origin.url").strip()
    except AssertionError:
        url = None  # git finds no url, or refuses the file
    expected = (normalise_remote(url, repo) if url else None) or str(repo.resolve())
    assert repository_identity(repo) == expected


@needs_git
def test_includes_are_not_followed(git: Git, tmp_path: Path) -> None:
    repo = make_repo(git, tmp_path / "repo")
    (tmp_path / "extra").write_text('[remote "origin"]\n\turl = git@h.example:from/include\n')
    with (repo / ".git" / "config").open("a") as config:
        config.write(f"[include]\n\tpath = {tmp_path / 'extra'}\n")
    assert git(repo, "config", "--get", "remote.origin.url").strip() == "git@h.example:from/include"
    assert repository_identity(repo) == str(repo.resolve())


@needs_git
@pytest.mark.parametrize("damage", ["binary", "directory", "fifo", "missing", "huge"])
def test_a_damaged_config_is_no_remote(damage: str, git: Git, tmp_path: Path) -> None:
    repo = make_repo(git, tmp_path / "repo", "git@github.com:acme/api.git")
    config = repo / ".git" / "config"
    config.unlink()
    if damage == "binary":
        config.write_bytes(b'[remote "origin"]\n\turl = git@github.com:acme/api\n\xff\xfe\x00')
    elif damage == "directory":
        config.mkdir()
    elif damage == "fifo":
        os.mkfifo(config)  # reading it would wait for a writer forever
    elif damage == "huge":
        config.write_text('[remote "origin"]\n\turl = git@github.com:acme/api\n' + "#" * (1 << 21))
    found: list[str | None] = []
    reader = threading.Thread(target=lambda: found.append(repository_identity(repo)), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():
        with config.open("w"):
            pass  # a writer, so the stuck reader ends with the test
        pytest.fail("reading the config waited for a writer")
    assert found == [str(repo.resolve())]


@pytest.mark.parametrize(
    "dot_git",
    ["gitdir:", "gitdir: nowhere", "not a pointer", "", "gitdir: ../elsewhere-not-git"],
)
def test_a_dot_git_file_that_names_no_repository_is_no_repository(dot_git: str, tmp_path: Path) -> None:
    (tmp_path / "elsewhere-not-git").mkdir()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / ".git").write_text(dot_git + "\n")
    assert repository_identity(folder) is None
    assert session_project({}, folder, no_home(tmp_path)) == str(folder.resolve())


@needs_git
def test_a_gitdir_pointer_is_followed_once(git: Git, tmp_path: Path) -> None:
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    (tmp_path / "hop").mkdir()
    (tmp_path / "hop" / ".git").write_text(f"gitdir: {api / '.git'}\n")
    assert repository_identity(tmp_path / "hop") == "github.com/acme/api"
    (tmp_path / "chain").mkdir()
    (tmp_path / "chain" / ".git").write_text(f"gitdir: {tmp_path / 'hop'}\n")
    assert repository_identity(tmp_path / "chain") is None


@needs_git
def test_git_is_never_run_and_its_environment_is_ignored(
    git: Git, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = make_repo(git, tmp_path / "api", "git@github.com:acme/api.git")
    git(api, "worktree", "add", "-q", str(tmp_path / "wt"))
    plain = tmp_path / "plain"
    plain.mkdir()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a program was started")

    for name in ("Popen", "run", "call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)
    for name in ("system", "fork", "posix_spawn", "posix_spawnp", "execv", "execve", "popen"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)
    monkeypatch.setenv("GIT_DIR", str(api / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(api))
    git_vars = {"GIT_DIR": str(api / ".git"), "GIT_WORK_TREE": str(api)}
    assert session_project(git_vars, tmp_path / "wt", no_home(tmp_path)) == "github.com/acme/api"
    assert session_project(git_vars, plain, no_home(tmp_path)) == str(plain.resolve())


# --- remote URLs ----------------------------------------------------------------------------------

REMOTES = [
    ("git@github.com:acme/api.git", "github.com/acme/api"),
    ("https://user:tok@github.com/acme/api", "github.com/acme/api"),
    ("ssh://git@github.com:22/acme/api.git/", "github.com/acme/api"),
    ("git://github.com/acme/api", "github.com/acme/api"),
    ("GitHub.COM:acme/api", "github.com/acme/api"),
    ("git+ssh://git@GITHUB.com/acme/api.git", "github.com/acme/api"),
    ("https://github.com/acme/api.git?token=abc#frag", "github.com/acme/api"),
    ("https://x-access-token:ghs_abc@github.com/Acme/API", "github.com/Acme/API"),
    ("user:pass@host.example:group/sub/repo.git", "host.example/group/sub/repo"),
    ("git@ssh.dev.azure.com:v3/org/proj/repo", "ssh.dev.azure.com/v3/org/proj/repo"),
    ("  git@github.com:acme/api.git\n", "github.com/acme/api"),
    ("file:///srv/git/api.git", "/srv/git/api"),
    ("file:///srv/git/api/.git", "/srv/git/api"),
    ("/srv/git/api.git/", "/srv/git/api"),
    ("ssh://host.example/srv/api/.git", "host.example/srv/api"),
    ("git@host.example:team/x@y", None),
    ("host.example:team/x@y", None),
    ("../upstream", "/work/upstream"),
    ("file://../upstream.git", "/work/upstream"),
    ("", None),
    ("   ", None),
    ("https://github.com", None),
    ("git@github.com:", None),
    ("https://user:pa/ss@github.com/acme/api", None),
    ("ext::ssh -i key host %S repo", None),
    ("https://[broken/acme/api", None),
    ("https://github.com/acme/api\nmore", None),
    ("@:x", None),
]


@pytest.mark.parametrize(("url", "identity"), REMOTES)
def test_a_remote_url_as_an_identity(url: str, identity: str | None) -> None:
    assert normalise_remote(url, Path("/work/repo")) == identity


@pytest.mark.parametrize("url", ["C:/repos/api.git", "c:\\repos\\api.git"])
def test_a_windows_drive_is_a_local_path_not_a_host(url: str, tmp_path: Path) -> None:
    identity = normalise_remote(url, tmp_path)
    assert identity is not None
    assert not identity.startswith("c/")
    assert identity == str((tmp_path / url).resolve()).removesuffix(".git")
