"""Typed contracts: Evidence (collectors -> rules) and Result (rules -> every consumer)."""
