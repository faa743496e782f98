"""squirrel-mcp-embeddings: search by meaning for squirrel-mcp.

Installing this distribution is the whole opt-in. It ships the model (model/,
put there by `nox -s fetch_model`), its integrity check (integrity.py), the
loader that embeds text with it (embedder.py), the encrypted vector file
(vectors.py), the warm-up that fills it (warmup.py), the fused order (fusion.py)
and the ranker over it (ranker.py), the hooks that tie them to squirrel-mcp
(hooks.py, doctor.py) and the plugin registered as the entry point `embeddings`
(plugin.py).
"""

from squirrel_mcp.plugin_api import __version__

__all__ = ["__version__"]
