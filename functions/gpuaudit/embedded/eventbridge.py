"""Amazon EventBridge's PutEvents, as strict as AWS where the publisher depends on it (issue #38): the stand-in the
world backend answers the product's own `events:PutEvents` with (embedded/responders/events.py).

Modelled (EventBridge API reference, PutEvents and PutEventsResultEntry; User Guide, "Calculating PutEvents event
entry size"):
- more than ten entries, or none, refuses the whole call (ValidationException);
- the entries' sizes together at or over 256 KB refuse the whole call ("Total size of the entries in the request is
  over the limit."), sizes counted as EventBridge counts them (report/events.entry_size);
- an entry without Source or DetailType is refused alone (InvalidArgument), a Detail that is not a JSON object
  too (MalformedDetail); the other entries of the call are accepted (partial failure, FailedEntryCount);
- injected refusals (`refuse_next`): the next N entries refused with an error code, e.g. ThrottlingException,
  whatever call they arrive in;
- an entry for a bus that does not exist is refused (ResourceNotFoundException).
Each accepted entry becomes the event EventBridge matches rules against (`delivered`): version, id, detail-type,
source, account, time, region, resources and the parsed detail.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuaudit.model.timeutil import iso
from gpuaudit.report.events import MAX_ENTRIES_PER_CALL, MAX_ENTRY_BYTES, entry_size


class PutEventsRefused(Exception):
    """The whole call refused: the API error EventBridge answers with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass
class EventBridgeStandIn:
    account_id: str
    region: str
    buses: set[str] = field(default_factory=lambda: {"default"})
    delivered: list[dict[str, Any]] = field(default_factory=list)
    delivered_to: list[str] = field(default_factory=list)  # the bus of each delivered event
    calls: list[int] = field(default_factory=list)  # entries per call, in order
    _refusals: list[str] = field(default_factory=list)

    def refuse_next(self, count: int, code: str = "ThrottlingException") -> None:
        """The next `count` entries (across calls) are refused with `code`."""
        self._refusals += [code] * count

    def _bus(self, name: str | None) -> str:
        """A bus named by name or ARN; the default bus when none is named."""
        given = name or "default"
        return given.rsplit("event-bus/", 1)[-1] if given.startswith("arn:") else given

    def put_events(self, params: dict[str, Any]) -> dict[str, Any]:
        items = params.get("Entries") or []
        if not 1 <= len(items) <= MAX_ENTRIES_PER_CALL:
            raise PutEventsRefused("ValidationException", f"1 validation error detected: Value at 'entries' failed to "
                                   f"satisfy constraint: Member must have length between 1 and {MAX_ENTRIES_PER_CALL}")
        sizes = [entry_size({"Source": "", "DetailType": "", **e}) for e in items]
        if sum(sizes) >= MAX_ENTRY_BYTES:
            raise PutEventsRefused("ValidationException", "Total size of the entries in the request is over the limit.")
        self.calls.append(len(items))
        answers = [self._one(e) for e in items]
        return {"FailedEntryCount": sum(1 for a in answers if "ErrorCode" in a), "Entries": answers}

    def _one(self, entry: dict[str, Any]) -> dict[str, Any]:
        if not entry.get("Source"):
            return _refused("InvalidArgument", "Parameter Source is not valid. Reason: Source is a required argument.")
        if not entry.get("DetailType"):
            return _refused("InvalidArgument",
                            "Parameter DetailType is not valid. Reason: DetailType is a required argument.")
        try:
            detail = json.loads(entry.get("Detail") or "{}")
        except ValueError:
            detail = None
        if not isinstance(detail, dict):
            return _refused("MalformedDetail", "Detail is malformed.")
        bus = self._bus(entry.get("EventBusName"))
        if bus not in self.buses:
            return _refused("ResourceNotFoundException", f"Event bus {bus} does not exist.")
        if self._refusals:
            code = self._refusals.pop(0)
            return _refused(code, f"{code} (injected)")
        event_id = str(uuid.uuid4())
        when = entry.get("Time") or datetime.now(UTC)
        self.delivered.append({"version": "0", "id": event_id, "detail-type": entry["DetailType"],
                               "source": entry["Source"], "account": self.account_id,
                               "time": iso(when if isinstance(when, datetime) else datetime.fromtimestamp(when, UTC)),
                               "region": self.region, "resources": list(entry.get("Resources") or []),
                               "detail": detail})
        self.delivered_to.append(bus)
        return {"EventId": event_id}


def _refused(code: str, message: str) -> dict[str, Any]:
    return {"ErrorCode": code, "ErrorMessage": message}
