"""RULES §8 E ("CloudTrail `UpdateCluster`, `UpdateClusterSoftware`, `UpdateFileSystem` or a manual
`Batch*ClusterNodes` shortly *before* the failure") with §0.5 ("before the failure" is measured from the onset the
operator states, else the first failure signal read). A change made after the onset — a replacement or an update
ordered in response to the failure — cannot have caused it: it is named, never the leading hypothesis. A change before
the onset, or one whose order is unknown (no onset), stays the hypothesis. §0.4: images are called current only where
the image IDs were read.
"""

from __future__ import annotations

import json

from tests.helpers.worlds import PClusterWorld, at

SINCE, UNTIL = at(9), at(11)


def _world(change_at: str) -> PClusterWorld:
    """One measured GPU node, no fault in its logs, and one UpdateFileSystem call for the cluster at `change_at`."""
    w = PClusterWorld("train", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(13))
    w.section("cloudtrail", "events").append({
        "EventId": "e1", "EventName": "UpdateFileSystem", "EventTime": change_at, "EventSource": "fsx.amazonaws.com",
        "Username": "ops", "Resources": [],
        "CloudTrailEvent": json.dumps({"requestParameters": {"clusterName": "train"}})})
    return w


def _e(result):
    return next(b for b in result.branches if b.branch == "E")


def test_a_change_after_the_stated_onset_is_named_but_is_not_the_cause() -> None:
    result = _world(at(10, 30)).audit("train", mode="incident", since=SINCE, until=UNTIL, onset=at(10))
    e = _e(result)
    assert e.status == "Ruled out" and e.label is None
    assert "UpdateFileSystem at 2026-10-01T10:30:00Z" in e.evidence and "after the onset" in e.evidence
    assert "branch E" not in result.headline


def test_a_change_before_the_stated_onset_is_the_hypothesis() -> None:
    result = _world(at(9, 30)).audit("train", mode="incident", since=SINCE, until=UNTIL, onset=at(10))
    e = _e(result)
    assert (e.status, e.label) == ("UNVERIFIED", "Hypothesis (to validate)")
    assert result.headline.startswith("Leading hypothesis: branch E")


def test_without_an_onset_a_change_in_the_window_stays_the_hypothesis() -> None:
    e = _e(_world(at(10, 30)).audit("train", mode="incident", since=SINCE, until=UNTIL))
    assert (e.status, e.label) == ("UNVERIFIED", "Hypothesis (to validate)")


def test_images_are_not_called_current_where_no_image_id_was_read() -> None:
    e = _e(_world(at(10, 30)).audit("train", mode="incident", since=SINCE, until=UNTIL, onset=at(10)))
    assert "images current" not in e.evidence
    assert "Not checked" in e.evidence
