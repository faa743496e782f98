"""The leak measure: searches in one project return nothing of another, and find their own as well.

Three projects of 200 memories each and 50 memories with no project, made up here: in every
project the same 30 questions have an answer (its own: "The database we use here is ..."
with another value in each), among 170 other notes. Through the real server, a host in each
project asks its 30 questions with default arguments: no result may come from another project,
and the share of questions whose own answer is in the first five may be no lower than in a vault
holding that project alone (with the same 50 memories of none).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import call, run_cli, server_params
from tests.exports import write_export

pytestmark = pytest.mark.anyio

PROJECTS = ["github.com/acme/api", "github.com/acme/web", "/home/ada/notes"]
# Each topic is asked about in every project, and each project answers it with a value of its own.
TOPICS = [
    ("database", ["PostgreSQL 16", "MySQL 8", "SQLite"]),
    ("test runner", ["pytest", "unittest", "nose2"]),
    ("deploy day", ["Friday", "Tuesday", "Monday"]),
    ("CI provider", ["GitHub Actions", "GitLab CI", "Jenkins"]),
    ("code formatter", ["ruff format", "black", "yapf"]),
    ("package manager", ["uv", "pip", "poetry"]),
    ("container runtime", ["podman", "docker", "containerd"]),
    ("cloud region", ["eu-west-1", "us-east-2", "ap-south-1"]),
    ("message queue", ["RabbitMQ", "Kafka", "NATS"]),
    ("cache server", ["Redis", "Memcached", "Valkey"]),
    ("frontend framework", ["React", "Svelte", "Vue"]),
    ("logging library", ["structlog", "loguru", "logging"]),
    ("issue tracker", ["Linear", "Jira", "GitHub Issues"]),
    ("code review rule", ["two approvals", "one approval", "pair review"]),
    ("release branch", ["release/2026", "stable", "main"]),
    ("python version", ["3.13", "3.12", "3.11"]),
    ("licence", ["Apache-2.0", "MIT", "GPL-3.0"]),
    ("monitoring tool", ["Grafana", "Datadog", "Prometheus"]),
    ("secret store", ["Vault", "SOPS", "1Password"]),
    ("API style", ["REST", "GraphQL", "gRPC"]),
    ("ORM", ["SQLAlchemy", "Django ORM", "Peewee"]),
    ("web server", ["nginx", "Caddy", "Apache"]),
    ("on-call rotation", ["weekly", "daily", "fortnightly"]),
    ("branching model", ["trunk based", "git flow", "GitHub flow"]),
    ("timezone for cron jobs", ["UTC", "Europe/Lisbon", "America/Chicago"]),
    ("type checker", ["mypy", "pyright", "pyre"]),
    ("docs generator", ["MkDocs", "Sphinx", "Docusaurus"]),
    ("feature flag service", ["Unleash", "LaunchDarkly", "Flagsmith"]),
    ("load balancer", ["HAProxy", "Envoy", "Traefik"]),
    ("backup schedule", ["nightly", "hourly", "weekly"]),
]
FILLER_WORDS = [
    "meeting",
    "notes",
    "discussed",
    "budget",
    "roadmap",
    "hiring",
    "offsite",
    "retro",
    "sprint",
    "demo",
    "slides",
    "customer",
    "feedback",
    "latency",
    "dashboard",
    "refactor",
    "cleanup",
    "onboarding",
    "handbook",
    "holiday",
    "travel",
    "invoice",
]
OWN_FILLER = 200 - len(TOPICS)
NONE_COUNT = 50


def revision(number: int, text: str, project: str | None, category: str = "fact") -> dict[str, Any]:
    stamp = f"2026-11-{1 + number % 28:02d}T08:00:00.000Z"
    fields = {"entity": "user", "text": text, "tags": [], "keywords": [], "category": category}
    memory_id = f"{number:016x}"
    return {
        "id": memory_id,
        "revisions": [
            {
                "id": memory_id,
                **fields,
                **({} if project is None else {"project": project}),
                "createdAt": stamp,
                "updatedAt": stamp,
                "revision": 1,
                "change": "created",
            }
        ],
    }


def memories(projects: list[str]) -> list[dict[str, Any]]:
    """The memories of `projects` (200 each) and the 50 with none, numbered the same in every vault."""
    rng = random.Random(44)
    made = []
    for index, project in enumerate(PROJECTS):
        base = 1000 * (index + 1)
        chosen = project in projects
        for topic_index, (topic, values) in enumerate(TOPICS):
            text = f"The {topic} we use here is {values[index]}."
            if chosen:
                made.append(revision(base + topic_index, text, project))
        for number in range(OWN_FILLER):
            text = " ".join(rng.sample(FILLER_WORDS, k=6)) + f" (note {number})"
            if chosen:
                made.append(revision(base + 100 + number, text.capitalize(), project, "note"))
    for number in range(NONE_COUNT):
        text = "The user " + " ".join(rng.sample(FILLER_WORDS, k=5)) + f" (general {number})"
        made.append(revision(number + 1, text, None, "note"))
    return made


def vault(base: dict[str, str], folder: Path, projects: list[str]) -> dict[str, str]:
    """A vault at `folder` imported with the memories of `projects` and of none."""
    env = {**base, "SQUIRREL_VAULT": str(folder / "vault.sqlite3"), "XDG_CACHE_HOME": str(folder / "cache")}
    file = write_export(folder / "export.json", memories(projects))
    imported = run_cli(env, "import", "--create", str(file))
    assert imported.returncode == 0, imported.stderr
    return env


async def ask(env: dict[str, str], project: str) -> tuple[int, int, int, int]:
    """For a host in `project`: (questions whose own answer is in the first 5, and first, results
    from another project), and the results from another project when three of the questions are
    asked of every one."""
    found = first = foreign = seen_elsewhere = 0
    index = PROJECTS.index(project)
    async with Client(server_params({**env, "SQUIRREL_PROJECT": project})) as client:
        for topic, values in TOPICS:
            answer = await call(client, "search_memory", query=f"Which {topic} do we use?", limit=5)
            results = answer["results"]
            foreign += sum(1 for hit in results if hit["project"] not in (project, None))
            own = f"The {topic} we use here is {values[index]}."
            found += any(hit["text"] == own for hit in results)
            first += bool(results) and results[0]["text"] == own
        # Asked of every project, the same questions find the others' answers: the measure can see a leak.
        for topic, _ in TOPICS[:3]:
            every = await call(
                client, "search_memory", query=f"Which {topic} do we use?", project="*", limit=5
            )
            seen_elsewhere += sum(1 for hit in every["results"] if hit["project"] not in (project, None))
    return found, first, foreign, seen_elsewhere


async def test_no_result_from_another_project_and_no_lower_recall_than_alone(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "mixed").mkdir()
    mixed = vault(vault_env, tmp_path / "mixed", PROJECTS)
    for project in PROJECTS:
        alone_folder = tmp_path / f"alone-{PROJECTS.index(project)}"
        alone_folder.mkdir()
        alone = vault(vault_env, alone_folder, [project])
        found_mixed, first_mixed, foreign, elsewhere = await ask(mixed, project)
        found_alone, first_alone, _, _ = await ask(alone, project)
        # The figures, for whoever runs this with -s.
        print(
            f"{project}: own answer in the first 5 {found_mixed}/{len(TOPICS)} mixed, {found_alone} alone; "
            f"first {first_mixed} mixed, {first_alone} alone; other projects' with '*': {elsewhere}"
        )
        assert foreign == 0, project
        assert first_mixed >= first_alone, (project, first_mixed, first_alone)
        assert elsewhere > 0, project
        assert found_mixed >= found_alone, (project, found_mixed, found_alone)
        # The questions are answerable: the measure would say nothing if none were found.
        assert found_alone >= len(TOPICS) * 0.9, (project, found_alone)
