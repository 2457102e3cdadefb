"""The account's CloudTrail reads kept between lookups (collectors/trail.py): per event name, the range read and its
events. A model of its own so the AWS port can hold one without importing the collector."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from gpuaudit.model.timeutil import UtcDatetime

FORMAT = "gpu-audit-trail/1"


class TrailRead(BaseModel):
    """Every event of one name from `start` to `end` (as far as CloudTrail had delivered them when read)."""

    start: UtcDatetime
    end: UtcDatetime
    events: list[dict[str, Any]] = Field(default_factory=list)  # LookupEvents items, EventTime as ISO text


class TrailShare(BaseModel):
    format: str = FORMAT
    reads: dict[str, TrailRead] = Field(default_factory=dict)  # by event name
    changed: bool = Field(default=False, exclude=True)  # a read was added since it was loaded
