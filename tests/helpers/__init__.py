"""Tiny world builders for the collector, coverage and end-to-end tests."""
