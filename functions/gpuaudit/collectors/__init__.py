"""Collectors: the only code that calls AWS. Read-only, paginated to the end, batched."""
