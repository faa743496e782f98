"""Calibrating the prompt hook's confidence rule (squirrel_mcp.server.confidence) on data.

The prompt hook searches the session's memories with the prompt's text (limit 5, the
session's default scope) and shows the agent only the hits the rule keeps. This script
asks that search, through `run_search` (the code behind search_memory) with the real
plugin and model once every memory is embedded, and words only, for two kinds of prompt:

- questions a vault answers: LoCoMo's questions of categories 1-4 in their conversation's
  vault, one memory per turn (the data is read at run time from outside the repository,
  as scripts/bench_locomo.py and scripts/calibrate_floor.py do). Per question: was
  anything shown, and did what was shown hold an evidence turn. The recall corpus's
  paraphrase and exact-word queries (tests/recall/) are reported beside them.
- prompts nothing in a vault answers (scripts/hook_prompts.py: coding requests, greetings,
  follow-ups, written for this before anything was measured), in the recall corpus's
  vault, in each LoCoMo conversation's, and in one vault holding them all: the share of
  prompts where anything is shown.

Each search's five hits are kept, so every rule of the grid is applied to the same
rankings (`Rule.kept`, the code `confident_hits` runs). The rule chosen for each ranking
keeps the share of unanswerable prompts shown anything at or below TARGET in every vault,
and, under that, shows an evidence turn for (within EVEN of) the most LoCoMo questions.
The section of docs/benchmarks/hooks.md between its calibration markers is rewritten; the
rest of the file is kept. `--cache FILE` keeps the searches (outside the repository) so
the grid can be re-run on them without searching again.
"""

from __future__ import annotations

import argparse
import pickle
import secrets
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench_locomo import DATA, Conversation, conversation_files, load
from calibrate_floor import conversation_memories, vault_of
from doc_sections import write_section
from hook_prompts import PROMPTS
from hooks_grid import (
    EVEN,
    GAPS,
    HYBRID,
    LEADS,
    LEXICAL,
    SCORES,
    SEMANTIC,
    TARGET,
    WORDS,
    Asked,
    Figures,
    answered,
    choose,
    figures,
    grid,
    narrowed,
    narrowest,
    within_target,
)

ROOT = Path(__file__).resolve().parent.parent
# The recall corpus's loader lives with the tests; run from anywhere, it is found from the root.
sys.path.insert(0, str(ROOT))

from squirrel_mcp.book.memories import MemoryStore  # noqa: E402
from squirrel_mcp.core.models import Revision  # noqa: E402
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager  # noqa: E402
from squirrel_mcp.server import confidence  # noqa: E402
from squirrel_mcp.server.confidence import Rule  # noqa: E402
from squirrel_mcp.server.searching import run_search  # noqa: E402
from squirrel_mcp.storage.local import LocalVault  # noqa: E402
from tests.recall.corpus import CORPUS, NOW, SETS, UNANSWERABLE, hex_id, revision  # noqa: E402

REPORT = ROOT / "docs" / "benchmarks" / "hooks.md"
# The prompt hook's search: five hits, the session's own project and the memories of none.
# Every memory here has no project, so a session in any project sees them all.
LIMIT = 5
SCOPE: frozenset[str | None] = frozenset({None})
ALL_IN_ONE = "all in one"


@dataclass
class Searcher:
    """A vault's store and the hosts that rank its searches, by ranking name."""

    store: MemoryStore
    hosts: dict[str, PluginHost]

    def ask(self, kind: str, vault: str, text: str, answers: frozenset[str]) -> list[Asked]:
        asked = []
        for ranking, host in self.hosts.items():
            result = run_search(self.store, host, text, limit=LIMIT, projects=SCOPE, now=NOW)
            asked.append(Asked(kind, vault, ranking, list(result.results), answers))
        return asked


@contextmanager
def searcher_of(memories: list[Revision], *, words_only: bool) -> Iterator[Searcher]:
    """A throwaway vault of `memories`: words only, or also hybrid with the plugin warm."""
    if not words_only:
        with vault_of(memories) as vault:
            yield Searcher(vault.store, {HYBRID: vault.hybrid, WORDS: vault.lexical})
        return
    with tempfile.TemporaryDirectory(prefix="squirrel-hooks-") as scratch:
        storage = LocalVault(Path(scratch) / "vault.sqlite3", create=True)
        try:
            store = MemoryStore.create(storage, secrets.token_urlsafe(16))
            store.import_histories([[memory] for memory in memories])
            yield Searcher(store, {WORDS: PluginHost(get_plugin_manager())})
        finally:
            storage.close()


def conversation_asked(conversation: Conversation, *, words_only: bool) -> list[Asked]:
    """Every question and every prompt in one conversation's vault (a memory per turn)."""
    memories, dia = conversation_memories(conversation)
    turns: dict[str, set[str]] = {}
    for memory_id, dia_id in dia.items():
        turns.setdefault(dia_id, set()).add(memory_id)
    asked: list[Asked] = []
    with searcher_of(memories, words_only=words_only) as searcher:
        for question in conversation.questions:
            answers = frozenset(m for d in question.evidence for m in turns.get(d, ()))
            asked += searcher.ask("locomo", conversation.name, question.text, answers)
        for prompt in PROMPTS:
            asked += searcher.ask("prompt", conversation.name, prompt, frozenset())
    print(f"{conversation.name}: searched", flush=True)
    return asked


def corpus_asked(*, words_only: bool) -> list[Asked]:
    """The recall corpus's paraphrase and exact-word queries, and every prompt, in its vault."""
    asked: list[Asked] = []
    with searcher_of([revision(memory) for memory in CORPUS], words_only=words_only) as searcher:
        for kind in ("paraphrase", "exact"):
            for query in SETS[kind]:
                answers = frozenset(hex_id(corpus_id) for corpus_id in query["expected"])
                asked += searcher.ask(kind, "recall corpus", query["query"], answers)
        for prompt in PROMPTS:
            asked += searcher.ask("prompt", "recall corpus", prompt, frozenset())
        # Questions of the shape LoCoMo's are, that nothing in this vault answers: reported, not a target.
        for question in UNANSWERABLE:
            asked += searcher.ask("unanswerable", "recall corpus", question["query"], frozenset())
    print("recall corpus: searched", flush=True)
    return asked


def all_in_one_asked(conversations: Sequence[Conversation], *, words_only: bool) -> list[Asked]:
    """Every prompt in one vault holding the recall corpus and every conversation's turns.

    A larger vault gives a prompt more memories to come close to by chance, and raises BM25's
    scores (a word is rarer among more memories): the rule must hold there too.
    """
    memories = [revision(memory) for memory in CORPUS]
    for conversation in conversations:
        memories += conversation_memories(conversation)[0]
    memories = [memory.model_copy(update={"id": f"{n:016x}"}) for n, memory in enumerate(memories, 1)]
    asked: list[Asked] = []
    with searcher_of(memories, words_only=words_only) as searcher:
        for prompt in PROMPTS:
            asked += searcher.ask("prompt", ALL_IN_ONE, prompt, frozenset())
    print(f"{ALL_IN_ONE}: searched", flush=True)
    return asked


def rule_text(rule: Rule) -> str:
    parts = [] if rule.min_semantic is None else [f"semanticScore >= {rule.min_semantic:.2f}"]
    if rule.min_lexical <= 1:
        parts.append(f"lexicalScore >= {rule.min_lexical:g}")
    text = " or ".join(parts) or "nothing"
    if rule.min_score:
        text = f"({text}) and score >= {rule.min_score:g}"
    if rule.min_gap:
        text += f"; the first hit {rule.min_gap:g} ahead of the second"
    if rule.within_best is not None:
        text += f"; only hits within {rule.within_best:g} of the best one's score"
    return text


def row(rule: Rule, fig: Figures, vaults: Sequence[str]) -> str:
    prompts = " | ".join(f"{fig.prompts.get(vault, 0.0):.0%}" for vault in vaults)
    kinds = " | ".join(f"{fig.answered.get(kind, 0.0):.1%}" for kind in ("paraphrase", "exact"))
    return (
        f"| {rule_text(rule)} | {fig.shown.get('locomo', 0.0):.1%} | {fig.answered.get('locomo', 0.0):.1%} | "
        f"{fig.precision.get('locomo', 0.0):.1%} | {fig.hits_shown:.2f} | {fig.hits_answering:.1%} | "
        f"{kinds} | {fig.shown.get('unanswerable', 0.0):.0%} | {prompts} |"
    )


# Per ranking: the rule picked, every rule of the grid measured, and the picked rule's cuts.
Chosen = dict[str, tuple[tuple[Rule, Figures], list[tuple[Rule, Figures]], list[tuple[Rule, Figures]]]]


def intro(questions: dict[str, int], names: Sequence[str], build: str) -> list[str]:
    """What was measured, how, and how the rule was picked."""
    return [
        "## Calibration",
        "",
        "Written by scripts/calibrate_hooks.py (`python scripts/calibrate_hooks.py [LOCOMO_DIR]`; `nox -s",
        "bench` runs it), with the embeddings plugin and its model installed (`--words-only` without),",
        "through `run_search` (the code behind search_memory) as the prompt hook searches: limit 5, the",
        "session's default scope, every memory embedded first.",
        f"Build measured: {build}.",
        "",
        f"- Answerable: LoCoMo's {questions.get('locomo', 0)} questions of categories 1-4 (conversations",
        f"  {', '.join(names)}), each in its conversation's vault of one memory per turn (the data is",
        "  read at run time from outside the repository). Shown anything: the rule kept a hit; shown an",
        "  evidence turn: a kept hit is one of the question's evidence turns; hits shown: per question",
        "  shown anything; evidence hits: the share of the hits shown that are evidence turns. Beside",
        f"  them, the recall corpus's {questions.get('paraphrase', 0)} paraphrase and "
        f"{questions.get('exact', 0)} exact-word queries (tests/recall/):",
        f"  a kept hit is an expected memory; and its {questions.get('unanswerable', 0)} unanswerable "
        "questions (tests/recall/",
        "  unanswerable.json: shaped like questions, about things the corpus does not hold): the share",
        "  shown anything, reported but not a target.",
        f"- Unanswerable: the {len(PROMPTS)} prompts of scripts/hook_prompts.py (coding requests, greetings,",
        "  follow-ups, written before anything was measured), in the recall corpus's vault, in each",
        "  conversation's, and in one vault holding all of them (all in one: a larger vault gives a prompt",
        "  more memories to come close to by chance, and raises BM25's scores): the share of prompts",
        "  shown anything.",
        f"- Chosen: of the rules that keep every vault's unanswerable share at or below {TARGET:.0%},",
        f"  those within {EVEN * 100:g} point of the most LoCoMo questions shown an evidence turn count as",
        "  even, and of them the one showing the fewest prompts anything in its worst vault wins (with",
        f"  {len(PROMPTS)} prompts, a rule at the target's edge is one prompt from past it); the rule",
        "  strictly the most is listed under the table. Then, of that rule with each cut below the",
        f"  best hit's score, the one losing at most {EVEN * 100:g} point of LoCoMo questions shown an",
        "  evidence turn that shows the fewest hits.",
    ]


def render(chosen: Chosen, names: Sequence[str], args: argparse.Namespace) -> str:
    vaults = ["recall corpus", *names, ALL_IN_ONE]
    header = (
        "| rule | LoCoMo: shown anything | shown an evidence turn | of those shown, answered | hits shown "
        "| evidence hits | paraphrase: answered | exact: answered | unanswerable questions: shown anything | "
        + " | ".join(f"prompts shown anything: {vault}" for vault in vaults)
        + " |"
    )
    rule_line = "|---" + "|---:" * (8 + len(vaults)) + "|"
    questions = next(iter(chosen.values()))[0][1].questions
    lines = [*intro(questions, names, args.build), "", "### Chosen", "", "| ranking |" + header[1:]]
    lines.append("|---" + rule_line)
    for ranking, ((rule, fig), _, _) in chosen.items():
        lines.append(f"| {ranking} " + row(rule, fig, vaults))
    lines.append("")
    for ranking, ((rule, _), measured, _) in chosen.items():
        most = max(within_target(measured), key=answered)
        shipped = confidence.HYBRID if ranking == HYBRID else confidence.WORDS_ONLY
        lines.append(
            f"- {ranking}: squirrel_mcp/server/confidence.py "
            + ("holds this rule" if shipped == rule else f"holds another rule ({rule_text(shipped)})")
            + f"; strictly the most: {rule_text(most[0])}, {answered(most):.1%} shown an evidence turn, "
            f"{most[1].worst_prompts:.0%} of prompts shown anything in its worst vault."
        )
    for ranking, (_, measured, variants) in chosen.items():
        lines += ["", f"### {ranking}: each threshold alone, and the best rule within the target", ""]
        lines += [header, rule_line, *(row(rule, fig, vaults) for rule, fig in frontier(ranking, measured))]
        lines += [
            "",
            f"### {ranking}: the rule picked, with each cut below the best hit",
            "",
            header,
            rule_line,
        ]
        lines += [row(rule, fig, vaults) for rule, fig in variants]
    lines += ["", "Grids searched (every combination of the values):", ""]
    for ranking in chosen:
        semantic = f"semanticScore {listed(SEMANTIC)}; " if ranking == HYBRID else ""
        lines.append(
            f"- {ranking}: {semantic}lexicalScore {listed(LEXICAL)}; score {listed(SCORES[ranking])}; "
            f"the first hit's lead in score {listed(GAPS[ranking])}; then the cut below the best hit "
            f"{listed([lead for lead in LEADS[ranking] if lead is not None])} (or none)."
        )
    lines.append("")
    return "\n".join(lines)


def listed(values: Sequence[float]) -> str:
    return ", ".join(f"{value:g}" for value in values)


def frontier(ranking: str, measured: Sequence[tuple[Rule, Figures]]) -> list[tuple[Rule, Figures]]:
    """For each value of the ranking's main threshold: it alone, then the best rule within the target."""
    rows = []
    for value in SEMANTIC if ranking == HYBRID else LEXICAL:
        if ranking == HYBRID:
            alone = Rule(min_semantic=value, min_lexical=1.01)
            mine = [pair for pair in measured if pair[0].min_semantic == value]
        else:
            alone = Rule(min_semantic=None, min_lexical=value)
            mine = [pair for pair in measured if pair[0].min_lexical == value]
        rows += [pair for pair in mine if pair[0] == alone]
        within = [pair for pair in mine if pair[1].worst_prompts <= TARGET]
        if within:
            best = choose(within)
            if best[0] != alone:
                rows.append(best)
    return rows


def searched(conversations: Sequence[Conversation], *, words_only: bool, cache: Path | None) -> list[Asked]:
    """Every search, made now, or read back from `cache` (written by an earlier run)."""
    if cache is not None and cache.exists():
        return [Asked(**row) for row in pickle.loads(cache.read_bytes())]
    asked = corpus_asked(words_only=words_only)
    for conversation in conversations:
        asked += conversation_asked(conversation, words_only=words_only)
    asked += all_in_one_asked(conversations, words_only=words_only)
    if cache is not None:
        cache.write_bytes(pickle.dumps([vars(search) for search in asked]))
    return asked


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DATA, help="the directory of LoCoMo's files")
    parser.add_argument("--words-only", action="store_true", help="no plugin: the words-only rule alone")
    parser.add_argument(
        "--report", type=Path, default=REPORT, help="the file whose calibration section is written"
    )
    parser.add_argument(
        "--cache", type=Path, help="keep the searches here (outside the repository) to re-run the grid"
    )
    parser.add_argument("--build", default="this checkout", help="which build this is, for the report")
    args = parser.parse_args(argv)
    files = conversation_files(args.data)
    if not files:
        # As bench_locomo.py: `nox -s bench` runs this where the data may not be.
        print(f"calibrate_hooks: no LoCoMo conversations in {args.data}; skipped", flush=True)
        return 0
    conversations = [load(path) for path in files]
    asked = searched(conversations, words_only=args.words_only, cache=args.cache)
    rankings = [WORDS] if args.words_only else [HYBRID, WORDS]
    chosen: Chosen = {}
    for ranking in rankings:
        mine = [search for search in asked if search.ranking == ranking]
        measured = [(rule, figures(rule, mine)) for rule in grid(ranking)]
        picked = choose(measured)
        variants = narrowed(ranking, picked[0], mine)
        chosen[ranking] = (narrowest(picked, variants), measured, variants)
    text = render(chosen, [c.name for c in conversations], args)
    write_section(args.report, "calibration", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
