"""Rendering: the Markdown report, rendered from the Result and nothing else, and its self-check."""
