"""The base of every evidence and history record: immutable once read, and refusing a field it does not declare, so
a misspelt or stale field in a stored payload fails loudly instead of being dropped."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
