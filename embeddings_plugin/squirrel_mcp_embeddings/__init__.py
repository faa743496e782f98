"""squirrel-mcp-embeddings: search by meaning for squirrel-mcp.

Installing this distribution is the whole opt-in. It ships the model (model/,
put there by `nox -s fetch_model`), its integrity check (integrity.py) and the
loader that embeds text with it (embedder.py). The vector store and fused ranker
arrive with the plugin hooks (see the issues); until then search stays lexical.
"""

from squirrel_mcp import __version__

__all__ = ["__version__"]
