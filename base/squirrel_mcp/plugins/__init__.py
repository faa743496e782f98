"""The plugin layer: the hooks, what a doctor check reports, the manager and the host.

    hookspecs.py  the hook specifications (hooks only gain arguments)
    checks.py     what a `doctor` check reports
    manager.py    the plugin manager, `load_plugins`, and the host that calls plugins without trusting them

Plugin authors import `squirrel_mcp.plugin_api`, never these modules.
"""
