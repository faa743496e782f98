"""squirrel-mcp-embeddings: search by meaning for squirrel-mcp.

Installing this distribution is the whole opt-in. This release is the empty,
installable shell: the model loader, vector store and fused ranker arrive with
the plugin hooks (see the issues), and until then search stays lexical.
"""

from squirrel_mcp import __version__

__all__ = ["__version__"]
