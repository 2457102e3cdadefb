"""Every time a model holds is on the standard library's `datetime.UTC` (model/timeutil.py `UtcDatetime`), however it
arrived: pydantic gives each time it parses from JSON its own tzinfo object, and two times on different tzinfo
objects compare ~12x slower — the deployed steps and the benchmark judge evidence loaded from JSON (issue #50)."""

from __future__ import annotations

import importlib
import pkgutil
import typing
from datetime import UTC, datetime, timedelta, timezone

import pydantic

import gpuaudit.model
from gpuaudit.model.evidence import Evidence, NodeInfo, StreamActivity
from gpuaudit.model.timeutil import as_utc


def _models() -> list[type[pydantic.BaseModel]]:
    found = []
    for info in pkgutil.iter_modules(gpuaudit.model.__path__):
        module = importlib.import_module(f"gpuaudit.model.{info.name}")
        found += [value for value in vars(module).values() if isinstance(value, type)
                  and issubclass(value, pydantic.BaseModel) and value.__module__ == module.__name__]
    return found


def _holds_a_bare_datetime(annotation: object) -> bool:
    """A datetime anywhere in the annotation that is not UtcDatetime (Annotated with as_utc)."""
    if annotation is datetime:
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        if base is datetime:
            return not any(getattr(m, "func", None) is as_utc for m in extra)
        return _holds_a_bare_datetime(base)
    return any(_holds_a_bare_datetime(arg) for arg in typing.get_args(annotation))


def test_every_time_field_of_every_model_is_utc_datetime() -> None:
    models = _models()
    assert len(models) > 20
    bare = []
    for model in models:
        hints = typing.get_type_hints(model, include_extras=True)
        bare += [f"{model.__name__}.{name}" for name in model.model_fields if _holds_a_bare_datetime(hints[name])]
    assert bare == [], "time fields that keep pydantic's tzinfo: annotate them UtcDatetime (model/timeutil.py)"


def test_times_loaded_from_json_share_datetime_utc_including_keys_and_other_offsets() -> None:
    hour = datetime(2026, 10, 1, 6, tzinfo=UTC)
    node = NodeInfo(instance_id="i-0123456789abcdef0", status="Running",
                    launch_time=datetime(2026, 10, 1, 8, 30, tzinfo=timezone(timedelta(hours=2))))
    activity = StreamActivity(log_group="g", log_stream="s", lines=1, live_hours=1, hour_counts={hour: 1})
    loaded = NodeInfo.model_validate_json(node.model_dump_json())
    assert loaded.launch_time is not None and loaded.launch_time.tzinfo is UTC
    assert loaded.launch_time == datetime(2026, 10, 1, 6, 30, tzinfo=UTC)  # the same instant, on UTC
    keys = list((StreamActivity.model_validate_json(activity.model_dump_json()).hour_counts or {}).keys())
    assert keys == [hour] and keys[0].tzinfo is UTC
    assert Evidence.model_fields["now"].metadata  # the evidence's query time is one of them too
