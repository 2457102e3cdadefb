"""Margins and lookbacks, defined once: what the collectors read and what the rules judge use the same."""

from __future__ import annotations

from datetime import datetime, timedelta

# Control-plane events and GPU lines just outside the window still explain it (RULES §5 timeline).
TIMELINE_MARGIN = timedelta(minutes=30)
# CloudTrail is read from this long before the window: a change made shortly before a failure (RULES §8 E).
CLOUDTRAIL_LOOKBACK = timedelta(hours=6)
# `kernel:` lines are counted over the node's lifetime, at most this far back (RULES §4 (b)): the bound of a full
# read's cost (docs/DEPLOY.md); two weeks holds the boot lines of any node launched since.
KERNEL_LOOKBACK = timedelta(days=14)
# A node launched earlier whose streams held no `kernel:` line in those 14 days is looked up once more in a full
# read, back to its launch (RULES §4 (b): since launch), at most this far: the query names only those nodes' streams.
KERNEL_DEEP_LOOKBACK = timedelta(days=90)
# RunInstances of ParallelCluster compute nodes are looked up from this long before the window.
LAUNCH_LOOKBACK = timedelta(hours=24)
# How far before the window a named instance's RunInstances is looked up (its type and launch): the span kernel
# lines are searched over, so the node's type is known wherever its lines are.
NAMED_LAUNCH_LOOKBACK = KERNEL_LOOKBACK


def lookback(now: datetime, run_hours: float | None) -> tuple[datetime, datetime]:
    """The last similar run for metrics (P8, P9): the planned length held between 24 and 72 h."""
    hours = min(max(run_hours or 72.0, 24.0), 72.0)
    return now - timedelta(hours=hours), now
# The grain of the FSx Sum / Minimum readings kept for the rules (collectors/preflight.py): 10-minute means of the
# 1-minute values, enough to see a rise or a drop; a time read from them is known to within one bucket.
FSX_BUCKET = timedelta(minutes=10)
