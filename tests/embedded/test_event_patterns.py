"""The EventBridge pattern matcher of tests/helpers/event_patterns.py, table-tested against the EventBridge User
Guide's examples ("Amazon EventBridge event patterns", "Content filtering in Amazon EventBridge event patterns",
"Comparison operators for use in event patterns"): each row a documented pattern, an event, and whether it
matches."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.event_patterns import PatternError, matches

# The User Guide's sample EC2 state-change event, the one its pattern examples run against.
EC2 = {"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
       "detail-type": "EC2 Instance State-change Notification",
       "source": "aws.ec2", "account": "111122223333", "time": "2017-12-22T18:43:48Z", "region": "us-west-1",
       "resources": ["arn:aws:ec2:us-west-1:123456789012:instance/i-1234567890abcdef0"],
       "detail": {"instance-id": "i-1234567890abcdef0", "state": "terminated"}}
NUMBERS = {"detail": {"c-count": 5, "d-count": 3, "x-limit": 301.8}}

ROWS: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("exact source", {"source": ["aws.ec2"]}, EC2, True),
    ("exact source, other value", {"source": ["aws.s3"]}, EC2, False),
    ("values of one field are OR", {"source": ["aws.s3", "aws.ec2"]}, EC2, True),
    ("fields are AND", {"source": ["aws.ec2"], "detail-type": ["Other"]}, EC2, False),
    ("nested field", {"detail": {"state": ["terminated"]}}, EC2, True),
    ("nested field, other value", {"detail": {"state": ["running"]}}, EC2, False),
    ("a field the event lacks", {"detail": {"zone": ["a"]}}, EC2, False),
    ("exact matching is case-sensitive", {"detail": {"state": ["Terminated"]}}, EC2, False),
    ("event array intersects", {"resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f",
                                              "arn:aws:ec2:us-west-1:123456789012:instance/i-1234567890abcdef0"]},
     EC2, True),
    ("event array, no common value", {"resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f"]},
     EC2, False),
    ("prefix", {"time": [{"prefix": "2017-12-22"}]}, EC2, True),
    ("prefix, other", {"time": [{"prefix": "2017-10-02"}]}, EC2, False),
    ("prefix ignoring case", {"detail": {"state": [{"prefix": {"equals-ignore-case": "TERM"}}]}}, EC2, True),
    ("suffix", {"detail": {"FileName": [{"suffix": ".png"}]}}, {"detail": {"FileName": "image.png"}}, True),
    ("suffix is case-sensitive", {"detail": {"FileName": [{"suffix": ".png"}]}}, {"detail": {"FileName": "a.PNG"}},
     False),
    ("suffix ignoring case", {"detail": {"FileName": [{"suffix": {"equals-ignore-case": ".png"}}]}},
     {"detail": {"FileName": "a.PNG"}}, True),
    ("equals-ignore-case", {"detail": {"name": [{"equals-ignore-case": "alice"}]}}, {"detail": {"name": "ALICE"}},
     True),
    ("wildcard", {"detail": {"EventBusArn": [{"wildcard": "arn:aws:events:us-east-1:*:event-bus/*"}]}},
     {"detail": {"EventBusArn": "arn:aws:events:us-east-1:123456789012:event-bus/default"}}, True),
    ("wildcard, other", {"detail": {"EventBusArn": [{"wildcard": "arn:aws:events:us-east-1:*:event-bus/*"}]}},
     {"detail": {"EventBusArn": "arn:aws:events:us-west-2:123456789012:event-bus/default"}}, False),
    ("anything-but a string", {"detail": {"state": [{"anything-but": "initializing"}]}}, EC2, True),
    ("anything-but the value itself", {"detail": {"state": [{"anything-but": "terminated"}]}}, EC2, False),
    ("anything-but a number", {"detail": {"x-limit": [{"anything-but": 123}]}}, NUMBERS, True),
    ("anything-but a list", {"detail": {"state": [{"anything-but": ["stopped", "overloaded"]}]}}, EC2, True),
    ("anything-but a list holding the value", {"detail": {"state": [{"anything-but": ["stopped", "terminated"]}]}},
     EC2, False),
    ("anything-but a prefix", {"detail": {"state": [{"anything-but": {"prefix": "init"}}]}}, EC2, True),
    ("anything-but a prefix it has", {"detail": {"state": [{"anything-but": {"prefix": "term"}}]}}, EC2, False),
    ("anything-but ignoring case", {"detail": {"state": [{"anything-but": {"equals-ignore-case": "TERMINATED"}}]}},
     EC2, False),
    ("anything-but needs the field", {"detail": {"zone": [{"anything-but": "a"}]}}, EC2, False),
    ("numeric range", {"detail": {"c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 10]}],
                                  "x-limit": [{"numeric": ["=", 3.018e2]}]}}, NUMBERS, True),
    ("numeric, out of range", {"detail": {"c-count": [{"numeric": [">", 5]}]}}, NUMBERS, False),
    ("numeric does not match a string", {"detail": {"state": [{"numeric": [">", 0]}]}}, EC2, False),
    ("a number matches exactly as a number", {"detail": {"x-limit": [301.8]}}, NUMBERS, True),
    ("a number does not match its string", {"detail": {"x-limit": ["301.8"]}}, NUMBERS, False),
    ("exists", {"detail": {"state": [{"exists": True}]}}, EC2, True),
    ("exists, absent", {"detail": {"zone": [{"exists": True}]}}, EC2, False),
    ("does not exist", {"detail": {"zone": [{"exists": False}]}}, EC2, True),
    ("does not exist, present", {"detail": {"state": [{"exists": False}]}}, EC2, False),
    ("exists works on leaves only", {"detail": [{"exists": True}]}, EC2, False),
    ("null matches null", {"detail": {"responseElements": [None]}}, {"detail": {"responseElements": None}}, True),
    ("null is not a missing field", {"detail": {"responseElements": [None]}}, {"detail": {}}, False),
    ("empty string", {"detail": {"eventVersion": [""]}}, {"detail": {"eventVersion": ""}}, True),
    ("$or of conditions", {"detail": {"$or": [{"c-count": [{"numeric": [">", 10]}]},
                                               {"d-count": [{"numeric": ["<", 10]}]}]}}, NUMBERS, True),
    ("$or, none holds", {"detail": {"$or": [{"c-count": [{"numeric": [">", 10]}]},
                                             {"x-limit": [{"numeric": ["<", 10]}]}]}}, NUMBERS, False),
]


@pytest.mark.parametrize(("what", "pattern", "event", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_documented_pattern_examples(what: str, pattern: dict[str, Any], event: dict[str, Any], expected: bool) -> None:
    assert matches(pattern, event) is expected


@pytest.mark.parametrize("pattern", [
    {}, {"source": []}, {"source": "aws.ec2"}, {"detail": {"n": [{"numeric": ["~", 1]}]}},
    {"detail": {"s": [{"regex": "a.*"}]}}, {"detail": {"s": [{"exists": "yes"}]}}, {"$or": [{"source": ["a"]}]},
])
def test_a_pattern_eventbridge_refuses_is_an_error_never_no_match(pattern: dict[str, Any]) -> None:
    with pytest.raises(PatternError):
        matches(pattern, {"source": "a", "detail": {"n": 1, "s": "abc"}})
