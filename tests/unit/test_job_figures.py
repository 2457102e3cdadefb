"""A job's throughput and step-time figures (RULES §0.5, #35 item 10): the lines the common frameworks print pass the
job-figures query as the embedded Logs Insights evaluator runs it, and are read with the figure they print; lines
with no figure do not pass. Then the sustained-drop rule, on its thresholds (docs/decisions.md)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from gpuaudit.collectors.log_queries import JOB_QUERY
from gpuaudit.domain.throughput import JOB_FIGURE_MARKERS, read_figures
from gpuaudit.embedded.insights import LogRecord, run_query
from gpuaudit.model.evidence import JobFigure
from gpuaudit.rules.onset import sustained_drop

T0 = datetime(2026, 10, 1, 9, 0)
EPOCH_S = 1_790_000_000

# (line as the framework prints it, the figures it holds)
FRAMEWORK_LINES = [
    (" iteration     1200/  500000 | consumed samples:       614400 | elapsed time per iteration (ms): 1520.4 | "
     "throughput per GPU (TFLOP/s/GPU): 412.3 | learning rate: 2.999E-04 | lm loss: 2.113E+00 |",  # Megatron-LM
     [("TFLOP/s per GPU", 412.3), ("ms per iteration", 1520.4)]),
    ("Epoch 0:  45%|####5     | 1200/2660 [06:15<07:36, 3.20it/s, v_num=0, train_step_timing in s=0.312]",  # NeMo
     [("s per step", 0.312), ("it/s", 3.2)]),
    ("step 1200 loss 2.113 lr 3e-4 3.2 it/s", [("it/s", 3.2)]),
    (" 12%|#2        | 12/100 [00:30<03:00,  1.52s/it]", [("s/it", 1.52)]),  # tqdm, slower than one a second
    ("{'train_runtime': 100.0, 'train_samples_per_second': 12.3, 'train_steps_per_second': 0.4}",  # HF Trainer
     [("samples/s", 12.3)]),
    ("epoch=0/micro_step=100/global_step=100, RunningAvgSamplesPerSec=50.1, CurrSamplesPerSec=49.8",  # DeepSpeed
     [("samples/s", 49.8)]),
    # torchtitan
    ("[rank0]: step: 1200  loss:  2.1130  memory: 61.02GiB(77.2%)  tps: 5,123  tflops: 412.35  mfu: 41.7%",
     [("TFLOPS", 412.35), ("tokens/s", 5123.0)]),
    ("Throughput: 95.4 samples/sec, 48844.8 tokens/sec", [("samples/s", 95.4), ("tokens/s", 48844.8)]),
]
NO_FIGURE = ["[rank0] step 1200 | lm loss: 2.113 | consumed samples: 614400 | grad norm: 0.41",
             "ip-10-0-0-1:4711:4711 [0] NCCL INFO NET/OFI Selected Provider is efa",
             "kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus."]


def _query(messages: list[str]) -> list[str]:
    records = [LogRecord("/aws/batch/job", "rank-0", (EPOCH_S + i) * 1000, m) for i, m in enumerate(messages)]
    outcome = run_query(JOB_QUERY, records, EPOCH_S, EPOCH_S + len(messages), "111122223333")
    return [next(c["value"] for c in row if c["field"] == "@message") for row in outcome.rows]


def test_every_frameworks_line_passes_the_query_and_is_read_with_its_figures() -> None:
    passed = _query([line for line, _ in FRAMEWORK_LINES] + NO_FIGURE)
    assert passed == [line for line, _ in FRAMEWORK_LINES]  # oldest first; the lines without a figure left out
    for line, figures in FRAMEWORK_LINES:
        assert sorted(read_figures(line)) == sorted(figures), line


def test_a_comma_outside_a_thousands_group_ends_the_number() -> None:
    assert read_figures("[06:15<07:36,3.20it/s]") == [("it/s", 3.2)]  # never 363.2


def test_markers_are_plain_text_so_both_regex_dialects_read_them_alike() -> None:
    assert all(re.escape(m).replace("\\ ", " ") == m for m in JOB_FIGURE_MARKERS)


def _series(values: list[float]) -> list[JobFigure]:
    return [JobFigure(time=T0 + timedelta(minutes=i), log_group="/aws/batch/job", log_stream="rank-0",
                      measure="it/s", value=v) for i, v in enumerate(values)]


BASE = [10.0, 10.2, 9.8, 10.1, 9.9, 10.0]


@pytest.mark.parametrize(("values", "higher", "drop_at"), [
    (BASE + [6.9, 6.9, 6.9, 6.9], True, 6),  # below 70 % of the median, three readings on: a drop
    (BASE + [7.1, 7.1, 7.1, 7.1], True, None),  # at 71 %: not a drop
    (BASE + [5.0, 5.0, 10.0, 10.0, 10.0], True, None),  # two low readings, then back: a dip, not sustained
    (BASE[:4] + [5.0, 5.0, 5.0], True, None),  # four readings before it: too few to call a baseline
    (BASE + [10.0, 5.0, 5.0, 5.0], True, 7),  # the first of the sustained readings is the time
    ([1500.0] * 6 + [2200.0] * 3, False, 6),  # a step time up 47 % (rate at 68 %): a drop
    ([1500.0] * 6 + [2100.0] * 3, False, None),  # up 40 % (rate at 71 %): not
])
def test_a_sustained_drop_is_three_readings_below_70_percent_of_the_baseline_median(
        values: list[float], higher: bool, drop_at: int | None) -> None:
    drop = sustained_drop(_series(values), higher)
    assert (drop.time if drop else None) == (T0 + timedelta(minutes=drop_at) if drop_at is not None else None)


def test_a_drop_before_the_window_does_not_hide_a_later_one() -> None:
    values = [10.0] * 6 + [5.0] * 3 + [10.0] * 6 + [4.0] * 3  # a slow restart at 09:06, the drop at 09:15
    assert sustained_drop(_series(values), True) is not None
    drop = sustained_drop(_series(values), True, since=T0 + timedelta(minutes=10))
    assert drop is not None and drop.time == T0 + timedelta(minutes=15) and drop.before == 10.0


def test_the_drop_names_the_figure_before_and_after() -> None:
    drop = sustained_drop(_series([1520.4] * 8 + [3040.8] * 4), False)
    assert drop is not None and (drop.before, drop.after, drop.readings) == (1520.4, 3040.8, 4)
