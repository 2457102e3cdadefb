"""The state machine's on-demand input carries the operator's onset (#35 item 10, RULES §0.5); an onset outside
the window it names is refused at Plan, naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from handlers import plan
from handlers.runtime import InvalidEvent
from lambda_harness import Account, LambdaContext


def run(event: Any) -> dict[str, Any]:
    return plan.handler(event, LambdaContext())  # type: ignore[no-any-return]


def test_an_on_demand_request_keeps_its_onset(account: Account) -> None:
    (target,) = run({"cluster": "research-hp-slurm", "mode": "incident", "since": "2026-10-01T06:00:00Z",
                     "until": "2026-10-01T10:00:00Z", "onset": "2026-10-01T07:40:00Z"})["targets"]
    assert target["request"]["onset"] == "2026-10-01T07:40:00Z"


@pytest.mark.parametrize("onset", ["2026-10-01T05:59:00Z", "2026-10-01T10:01:00Z", "not-a-time"])
def test_an_onset_outside_the_window_or_unparseable_is_refused_naming_it(account: Account, onset: str) -> None:
    with pytest.raises(InvalidEvent, match="onset"):
        run({"cluster": "research-hp-slurm", "mode": "incident", "since": "2026-10-01T06:00:00Z",
             "until": "2026-10-01T10:00:00Z", "onset": onset})
