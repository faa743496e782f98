"""The ids of memories: random for a save, made of the content for `save_once`.

An id is 16 hex digits (64 bits): short for an agent to quote, unique enough for one
person. A content id is keyed with the account's own key, so storage, which sees ids,
cannot test a guess of the content against them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence

from squirrel_mcp.core.models import Category, Revision, now_iso

# The key the ids of `save_once` are derived under (see content_id).
CONTENT_ID_PURPOSE = "memory-content-ids"


def new_memory_id() -> str:
    """A random 64-bit id in hex: short for an agent to quote, unique enough for one person."""
    return secrets.token_hex(8)


# What makes two memories the same for `save_once`: entity, text, category, tags, keywords, project.
Fields = tuple[str, str, Category, list[str], list[str], str | None]


def created(memory_id: str, fields: Fields) -> Revision:
    """Revision 1 of a new memory of these fields, stamped now."""
    entity, text, category, tags, keywords, project = fields
    stamp = now_iso()
    return Revision(
        id=memory_id,
        entity=entity,
        text=text,
        tags=tags,
        keywords=keywords,
        category=category,
        project=project,
        createdAt=stamp,
        updatedAt=stamp,
        revision=1,
        change="created",
    )


def keyed_id(key: bytes, parts: Sequence[object]) -> str:
    """A memory id made of `parts` (JSON values): the first 8 bytes, in hex, of an HMAC-SHA256 under `key`.

    The key is the account's own (derived from its data key), so storage, which sees
    ids, cannot test a guess of the content against them.
    """
    message = json.dumps(list(parts), ensure_ascii=False).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:16]


def content_id(key: bytes, fields: Fields, attempt: int) -> str:
    """The id `save_once` gives a memory of these fields (`keyed_id` under CONTENT_ID_PURPOSE's key).

    Two processes saving the same memory at the same moment pick the same id, so the
    log's one-revision-1-per-id rule lets only one of them in. `attempt` counts up past
    ids already taken (a memory that said this once, then was corrected or deleted). A memory
    with no project has the id it had before projects were, so machines agree across versions.
    """
    *content, project = fields
    return keyed_id(key, [attempt, *content] if project is None else [attempt, *content, project])
