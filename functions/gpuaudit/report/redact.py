"""Account-ID redaction lives in model/redaction.py (the Result's JSON uses it too); re-exported for reports."""

from gpuaudit.model.redaction import MASK, redact, redact_tree

__all__ = ["MASK", "redact", "redact_tree"]
