"""World files (WORLD-FORMAT.md): strict validation whose errors name the key, and the in-memory
account they become (streams with explicit and generated lines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.worlds import ACCOUNT, NOW, REGION, ms

from gpuaudit.embedded.world import FORMAT, WorldError, load_world, parse_world
from gpuaudit.model.timeutil import parse_time

SHARED_WORLDS = Path(__file__).resolve().parents[3] / "shared" / "worlds"
PACKAGED_WORLDS = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit" / "worlds"


def base(**extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "now": NOW, "account_id": ACCOUNT, "region": REGION, **extra}


def one_stream(**stream: Any) -> dict[str, Any]:
    return base(logs={"groups": [{"logGroupName": "/g", "streams": [{"logStreamName": "s", **stream}]}]})


def error_of(raw: Any) -> str:
    with pytest.raises(WorldError) as raised:
        parse_world(raw)
    return str(raised.value)


# -- validation errors name the key ---------------------------------------------------------------
def test_unknown_top_level_key_is_named():
    # Given a typo'd section name; When parsed; Then the error names it
    message = error_of(base(ec3={"instances": []}))
    assert message.startswith("world: ec3: unknown key; allowed here: account_id, cloudtrail")


def test_unknown_key_in_a_section_is_named_with_its_section():
    message = error_of(base(ec2={"instance": []}))
    assert message.startswith("world: ec2.instance: unknown key; allowed here: capacity_block_extension_offerings")


def test_unknown_keys_in_a_log_group_and_a_stream_are_named_with_their_path():
    assert "logs.groups[0]" in error_of(base(logs={"groups": [{"logGroupName": "/g", "stream": []}]}))
    message = error_of(one_stream(event=[]))
    assert message.startswith("world: logs.groups[0].streams[0].event: unknown key; allowed here: arn,")


def test_bad_timestamp_in_an_event_names_the_event():
    message = error_of(one_stream(events=[["2026-10-01T00:00:00Z", "ok"], ["2026-13-45T00:00:00Z", "bad"]]))
    assert "logs.groups[0].streams[0].events[1][0]" in message
    assert "2026-13-45" in message


def test_bad_timestamp_in_periodic_names_the_field():
    message = error_of(one_stream(periodic=[{"from": NOW, "to": "soon", "every_s": 60, "message": "m"}]))
    assert "logs.groups[0].streams[0].periodic[0].to" in message


def test_bad_now_is_named():
    assert error_of(base(now="yesterday")).startswith("world: now: bad timestamp")
    assert error_of(base(now=True)) == "world: now: must be an ISO-8601 UTC time or epoch milliseconds, got True"


def test_missing_required_key_is_named():
    raw = base()
    del raw["account_id"]
    assert error_of(raw) == "world: account_id: missing required key"


def test_wrong_format_is_refused():
    assert error_of(base(format="gpu-audit-world/2")) == ("world: format: must be 'gpu-audit-world/1', "
                                                          "got 'gpu-audit-world/2'")
    assert "top level must be a JSON object" in error_of([base()])


def test_section_value_of_the_wrong_type_is_named():
    assert error_of(base(ec2={"instances": {}})) == "world: ec2.instances: must be a list, got {}"


def test_fault_with_bad_times_is_named():
    message = error_of(base(faults=[{"service": "logs", "operation": "StartQuery", "error": "X", "times": "two"}]))
    assert "faults[0].times" in message


def test_invalid_json_file_is_a_world_error_naming_the_position(tmp_path: Path):
    # Given a world file cut off mid-object
    text = json.dumps(base(), indent=1)
    path = tmp_path / "cut.world.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")

    # When loaded; Then the error says it is not valid JSON, names the file and a position
    with pytest.raises(WorldError) as raised:
        load_world(path)
    message = str(raised.value)
    assert "not valid JSON" in message and str(path) in message and "line" in message


def test_missing_world_file_is_a_world_error(tmp_path: Path):
    with pytest.raises(WorldError) as raised:
        load_world(tmp_path / "nope.world.json")
    assert "cannot read world file" in str(raised.value)


# -- what a valid world becomes -------------------------------------------------------------------
def test_now_accepts_iso_and_epoch_milliseconds_alike():
    assert parse_world(base(now=NOW)).now == parse_world(base(now=ms(NOW))).now == parse_time(NOW)


def test_sections_left_out_are_empty_not_errors():
    world = parse_world(base())
    assert world.section("ec2", "instances") == []
    assert world.log_groups == {}
    assert world.faults == []


def test_stream_first_last_and_count_come_from_events_and_periodic_lines():
    # Given explicit events and a generated run of one line every 10 minutes from 01:00 to 02:00 (exclusive)
    world = parse_world(one_stream(
        events=[["2026-10-01T03:00:00Z", "late"], ["2026-10-01T00:30:00Z", "early"]],
        periodic=[{"from": "2026-10-01T01:00:00Z", "to": "2026-10-01T02:00:00Z", "every_s": 600, "message": "tick"}]))

    # When the stream is read
    stream = world.log_groups["/g"].streams["s"]

    # Then the generated lines count, the bounds span both kinds, and events are in time order
    assert stream.count == 2 + 6
    assert stream.first_ms == ms("2026-10-01T00:30:00Z")
    assert stream.last_ms == ms("2026-10-01T03:00:00Z")
    assert [m for _, m in stream.events] == ["early", "late"]


def test_stream_lines_in_a_range_include_generated_lines_on_their_grid():
    world = parse_world(one_stream(
        periodic=[{"from": "2026-10-01T01:00:00Z", "to": "2026-10-01T02:00:00Z", "every_s": 600, "message": "tick"}]))
    stream = world.log_groups["/g"].streams["s"]

    # When asked for 01:05–01:40 inclusive
    lines = list(stream.lines(ms("2026-10-01T01:05:00Z"), ms("2026-10-01T01:40:00Z")))

    # Then only the grid points inside the range come back: 01:10, 01:20, 01:30, 01:40
    assert [t for t, _ in lines] == [ms(f"2026-10-01T01:{m}:00Z") for m in ("10", "20", "30", "40")]


@pytest.mark.parametrize("folder", [SHARED_WORLDS, PACKAGED_WORLDS], ids=["shared", "packaged"])
def test_shipped_worlds_load(folder: Path):
    if folder == SHARED_WORLDS and not folder.is_dir():
        pytest.skip(f"no shared worlds beside this checkout ({folder}); their packaged copies are checked")
    worlds = sorted(folder.glob("*.world.json"))
    assert worlds, f"no worlds in {folder}"
    for path in worlds:
        world = load_world(path)
        assert world.region == "us-west-2"
        assert world.source == str(path)



def test_demo_audits_read_every_instance_type_they_meet():
    # Given each audit the demo runs on the shipped worlds (the product's first impression); When run; Then no
    # DescribeInstanceTypes call failed for a type the world lacks (`InvalidInstanceType … t3.medium`)
    from helpers.worlds import aws_for

    from gpuaudit.devtools.demo import demo_request, demo_worlds
    from gpuaudit.pipeline import run_audit

    for entry in demo_worlds():
        result = run_audit(aws_for(load_world(entry["path"])), demo_request(entry))
        assert not [g for g in result.visibility_gaps if "DescribeInstanceTypes" in g], entry["title"]
