"""The collector is paused only for the step that asks it (model/gcpause.py) and given back as it was found, also
when the step fails; the judge and the result's JSON leave it as they found it."""

from __future__ import annotations

import gc

import pytest

from gpuaudit.model.gcpause import collection_paused


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_inside_and_enabled_again_after(collector_enabled) -> None:
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_when_the_step_fails(collector_enabled) -> None:
    with pytest.raises(ValueError), collection_paused():
        raise ValueError("the step failed")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled(collector_enabled) -> None:
    gc.disable()
    with collection_paused():
        pass
    assert not gc.isenabled()


def test_the_judge_and_the_json_give_the_collector_back(collector_enabled) -> None:
    from helpers.worlds import PClusterWorld, at

    w = PClusterWorld("train", n_compute=1)
    w.healthy(w.compute[0], at(-48), at(13))
    result = w.audit("train", mode="coverage", since=at(9), until=at(11))
    assert gc.isenabled()
    assert result.to_json().startswith("{")
    assert gc.isenabled()
