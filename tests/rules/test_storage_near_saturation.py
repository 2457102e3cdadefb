"""RULES §8 C: "No metric near saturation → 'storage not saturated'". A metric at or above 90 % for less than the
5 minutes that flag it is near saturation: not flagged, yet never called "storage not saturated" either."""

from __future__ import annotations

from tests.rules.test_fsx_every_metric import c_of, incident, metric, minutes, world


def test_a_peak_above_90_for_four_minutes_is_near_saturation_never_not_saturated() -> None:
    w = world()
    points = {**minutes(8, 0, 120, 41.0), **minutes(8, 50, 4, 96.5)}
    metric(w, "NetworkThroughputUtilization", points, ("FileServer", "OSS0000"))
    metric(w, "CPUUtilization", minutes(8, 0, 120, 12.0), ("FileServer", "MDS0000"))
    c = c_of(incident(w))
    assert "storage not saturated" not in c.evidence
    assert "near saturation" in c.evidence and "Maximum 96.5 %" in c.evidence
    assert c.status != "Root cause"
