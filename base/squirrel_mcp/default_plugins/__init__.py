"""Plugins that ship with the base server and are always registered."""
