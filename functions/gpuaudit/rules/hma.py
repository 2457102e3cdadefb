"""Parsing HyperPod health-monitoring-agent lines (RULES §5.2). Parsing only; judging is elsewhere."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuaudit.domain.markers import HMA_MARKER


@dataclass(frozen=True)
class HmaDetection:
    reason: str | None  # e.g. XidUserAppError, XidHardwareFailure
    condition: str | None  # node condition (NvidiaErrorReboot, NvidiaErrorTerminate) or DCGM "XID Error"
    message: str | None  # the detection text, often an `NVRM: Xid` line
    err_num: int | None  # DCGM policy violation ErrNum
    repair_action: str | None
    recommendation: str | None

    @property
    def words(self) -> str:
        """What the agent said, as it wrote it: reason, condition, repair action or recommendation."""
        said = [f"reason {self.reason}" if self.reason else "", f"condition {self.condition}" if self.condition else "",
                f"RepairAction \"{self.repair_action}\"" if self.repair_action else "",
                f"Recommendation \"{self.recommendation}\"" if self.recommendation else ""]
        return ", ".join(s for s in said if s)

    @property
    def is_dcgm_echo(self) -> bool:
        """The DCGM policy-violation line repeats a detection already reported by its NPD line."""
        return self.reason is None and self.err_num is not None


def _walk(value: Any, found: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            norm = key.replace(":", "").replace(" ", "").lower()
            if not isinstance(item, (dict, list)):
                found.setdefault(norm, item)
            _walk(item, found)
    elif isinstance(value, list):
        for item in value:
            _walk(item, found)


# The agent writes the node condition into the detection's message (`Node condition NvidiaErrorTerminate is now: True,
# reason: XidHardwareFailure, message: "NVRM: Xid …"`); a node health event says `detected fault type <condition>`.
_CONDITION_IN_TEXT = re.compile(r"\bNode condition (?P<c>\w+) is now: True|\bdetected fault type (?P<t>\w+)")


def _condition_in(text: Any) -> str | None:
    match = _CONDITION_IN_TEXT.search(text) if isinstance(text, str) else None
    return (match["c"] or match["t"]) if match else None


def parse_hma(message: str) -> HmaDetection | None:
    """An HMA detection from one log line (JSON as the agent writes it), or None."""
    if HMA_MARKER not in message and "NPD caught event" not in message and "reason" not in message.lower():
        return None
    try:
        data = json.loads(message)
    except json.JSONDecodeError:
        return None
    found: dict[str, Any] = {}
    _walk(data, found)
    err = found.get("errnum")
    detection = HmaDetection(
        reason=found.get("reason"),
        condition=found.get("condition") or found.get("nodecondition") or _condition_in(found.get("message"))
        or _condition_in(found.get("healthstatusreason")),
        message=found.get("message") if found.get("message") not in ("", None) else None,
        err_num=int(err) if isinstance(err, (int, float, str)) and str(err).isdigit() else None,
        repair_action=found.get("repairaction"), recommendation=found.get("recommendation"))
    if detection.reason is None and detection.err_num is None and detection.condition is None:
        return None
    return detection
