"""RULES §6 non-Xid memory signals as nvidia-smi prints them (issue #53 item 11): each routes to its verdict, and a
field reading `No` (or a histogram still at Max) is no signal at all."""

from __future__ import annotations

import pytest
from helpers.worlds import PClusterWorld, at
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit.rules.memory_signals import MEMORY_SIGNALS, may_hold_memory_signal


def audited(text: str):
    """One measured compute node whose kernel stream carries `text` at 10:05, audited 09:00–11:00 as an incident."""
    w = PClusterWorld("train", n_compute=1)
    gpu = w.compute[0]
    stream = w.healthy(gpu, at(-48), at(13))
    w.stream(w.group, stream, events=[(at(10, 5), f"{gpu.hostname} gpu-health: {text}")])
    result = w.audit("train", mode="incident", since=at(9), until=at(11))
    return next(n for n in result.nodes if n.instance_id == gpu.instance_id), \
        {b.branch: b for b in result.branches}


@pytest.mark.parametrize(("text", "verdict"), [
    # §6: `Remapped Rows … Pending: Yes` → REBOOT (a pending row remap, §7's REBOOT bar)
    ("nvidia-smi -q: GPU 00000000:53:00.0 Remapped Rows: Correctable Error: 0, Uncorrectable Error: 1, "
     "Pending : Yes, Remapping Failure Occurred : No", "REBOOT"),
    ("Remapped Rows Pending: Yes", "REBOOT"),
    ("nvidia-smi -q: GPU 00000000:53:00.0 Retired Pages Pending Page Blacklist : Yes", "REBOOT"),
    ("nvidia-smi -q: GPU 00000000:53:00.0 Channel Repair Pending : Yes", "REBOOT"),
    ("nvidia-smi -q: GPU 00000000:53:00.0 TPC Repair Pending : Yes", "REBOOT"),
    ("nvidia-smi -q: GPU 00000000:53:00.0 Unrepairable Memory : Yes", "REPLACE"),
    # a remap failure beside a pending remap: the stronger bar decides
    ("Remapped Rows: Pending : Yes, Remapping Failure Occurred : Yes", "REPLACE"),
])
def test_a_non_xid_memory_signal_meets_its_verdicts_bar(text: str, verdict: str) -> None:
    node, branches = audited(text)
    assert node.verdict == verdict
    assert "RULES §6" in (node.verdict_evidence or "")
    assert any(e.code is None and e.class_ == "hardware" for e in node.gpu_errors)  # the line it rests on is shown
    assert branches["A"].status == "Root cause"


@pytest.mark.parametrize("text", [
    "Bank Remap Availability Histogram: Max : 600 bank(s), High : 0 bank(s), Partial : 0 bank(s), Low : 40 bank(s), "
    "None : 0 bank(s)",
    "Bank Remap Availability Histogram: Max : 630 bank(s), High : 0 bank(s), Partial : 0 bank(s), Low : 0 bank(s), "
    "None : 10 bank(s)",
])
def test_bank_remap_availability_drifting_toward_low_or_none_is_monitor_not_hardware(text: str) -> None:
    node, branches = audited(text)
    assert node.verdict == "MONITOR"
    assert "Bank Remap Availability" in (node.verdict_evidence or "")
    # an early warning, not a hardware verdict: branch A does not blame the node for it
    assert branches["A"].status != "Root cause"
    assert [e.class_ for e in node.gpu_errors if e.code is None] == ["informational"]


@pytest.mark.parametrize("text", [
    "Remapped Rows: Correctable Error: 0, Uncorrectable Error: 0, Pending : No, Remapping Failure Occurred : No",
    "Remapped Rows: Pending : No, Pending Page Blacklist : No",
    "Bank Remap Availability Histogram: Max : 640 bank(s), High : 0 bank(s), Partial : 0 bank(s), Low : 0 bank(s), "
    "None : 0 bank(s)",
])
def test_a_clean_reading_is_no_signal(text: str) -> None:
    node, branches = audited(text)
    assert node.verdict is None
    assert node.xid_status == "Measured"
    assert branches["A"].status == "Ruled out"


# The one test that lets a line through to the nine signal patterns (memory_signals.py may_hold_memory_signal) must pass
# every line any of them matches, whatever its case: Unicode letters the regex engine folds to ASCII ones (ſ, K, İ) too.
_FOLDED = {"s": "ſ", "k": "K", "i": "İı"}
_MARKER_VARIANTS = st.sampled_from([s.marker for s in MEMORY_SIGNALS]).flatmap(
    lambda marker: st.tuples(*[st.sampled_from(sorted({ch, ch.upper(), ch.lower(), *_FOLDED.get(ch.lower(), "")}))
                               for ch in marker]).map("".join))
_SIGNAL_TAILS = st.sampled_from(["", " : Yes", ": yes", " Pending : Yes", " … Pending: Yes", " Partial : 2", ": No"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=8), _MARKER_VARIANTS, _SIGNAL_TAILS, st.text(max_size=8))
def test_no_line_a_memory_signal_matches_is_kept_from_it(before: str, marker: str, tail: str, after: str) -> None:
    message = before + marker + tail + after
    if any(signal.seen_in(message) for signal in MEMORY_SIGNALS):
        assert may_hold_memory_signal(message)
