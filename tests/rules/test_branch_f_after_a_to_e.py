"""RULES §8 F: "Only after A–E are each ruled out with evidence, listing the clean signals so nobody re-investigates
infrastructure: application-class Xids on many nodes …", with §0.5: `Proven` means a measured signal before the
failure — measured from the stated onset, else the first failure signal read; with neither, nothing is proven.

The world: two measured GPU nodes, each with an application-class Xid 31 at 10:05. A–E are set to `Ruled out` (each
with its own clean read) so that F's own rule is what is tested; the Judged facts are the pipeline's own.
"""

from __future__ import annotations

import pytest

from gpuaudit.model.result import BRANCH_NAMES, Branch
from gpuaudit.rules import branches as branch_rules
from gpuaudit.rules.context import Judged
from tests.helpers.worlds import PClusterWorld, at

CLEAN = {"A": "No hardware-class Xid on proven coverage", "B": "no reservation ending near the window",
         "C": "storage not saturated on fs-0123456789abcdef0", "D": "NCCL used EFA on every node",
         "E": "no cluster change in CloudTrail"}


def _judged(monkeypatch: pytest.MonkeyPatch, onset: str | None) -> Judged:
    w = PClusterWorld("train", n_compute=2)
    for n in w.compute:
        w.stream(w.group, w.healthy(n, at(-48), at(13)),
                 events=[(at(10, 5), f"{n.hostname} kernel: NVRM: Xid (PCI:0000:53:00): 31, pid=4242, name=python3, "
                                     "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted "
                                     "@ 0x7f1e_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")])
    seen: list[Judged] = []
    real = branch_rules.assess

    def keep(j: Judged):  # records the pipeline's own Judged facts, and returns what the pipeline would
        seen.append(j)
        return real(j)

    monkeypatch.setattr(branch_rules, "assess", keep)
    w.audit("train", mode="incident", since=at(9), until=at(11), onset=onset)
    return seen[0]


def _others() -> list[Branch]:
    return [Branch(branch=b, status="Ruled out", evidence=f"{text}; more detail") for b, text in CLEAN.items()]


def test_with_a_to_e_ruled_out_an_application_xid_before_the_onset_is_proven_and_lists_the_clean_signals(
        monkeypatch: pytest.MonkeyPatch) -> None:
    f = branch_rules.branch_f(_judged(monkeypatch, at(10, 30)), _others())
    assert (f.status, f.label) == ("Root cause", "Proven")
    for b, text in CLEAN.items():  # each clean signal, not only the letter
        assert f"{b} ({BRANCH_NAMES[b]}) — {text}" in f.evidence


def test_an_application_xid_after_the_stated_onset_is_not_proven(monkeypatch: pytest.MonkeyPatch) -> None:
    f = branch_rules.branch_f(_judged(monkeypatch, at(10)), _others())
    assert f.status != "Root cause" and f.label == "Hypothesis (to validate)" and f.confirming_measurement
    assert "after the onset" in f.evidence


def test_without_an_onset_or_a_failure_signal_f_is_not_proven(monkeypatch: pytest.MonkeyPatch) -> None:
    f = branch_rules.branch_f(_judged(monkeypatch, None), _others())
    assert f.status != "Root cause" and f.label == "Hypothesis (to validate)" and f.confirming_measurement
    assert "no onset stated" in f.evidence
