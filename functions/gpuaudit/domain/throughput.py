"""A training job's throughput and step-time figures, as the common frameworks print them (RULES §0.5: a job
throughput or step-time drop in a log read is a failure signal), and the Logs Insights query that finds them.

The forms are data: the query filters on every form's markers and the collectors read each matched line with the
same forms' patterns, so a form added here is searched and read alike (tests/unit/test_job_figures.py). Markers are
case-exact, in the casing the frameworks print, and plain text (no regex metacharacter), so both regex dialects read
them alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A figure as printed: digits, with thousands commas only in groups of three (torchtitan's "tps: 5,123"; a comma
# elsewhere ends the number: tqdm's "07:36, 3.20it/s"), a fraction, an exponent.
_NUMBER = r"((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?)"


@dataclass(frozen=True)
class FigureForm:
    measure: str  # how the result names the figure: "TFLOP/s per GPU", "ms per iteration"
    higher_is_better: bool  # a throughput (True) or a step time (False: a rise is the drop)
    markers: tuple[str, ...]  # what the query's filter looks for (any one)
    reading: re.Pattern[str]  # the figure itself: the first group that matched is the number


FIGURE_FORMS: tuple[FigureForm, ...] = (
    # Megatron-LM / NeMo: "throughput per GPU (TFLOP/s/GPU): 412.3"
    FigureForm("TFLOP/s per GPU", True, ("TFLOP/s/GPU",), re.compile(rf"TFLOP/s/GPU\)?\s*[:=]\s*{_NUMBER}")),
    # torchtitan "tflops: 412.35", NeMo / Lightning callbacks "TFLOPS_per_GPU=412", "tflops_per_gpu: 412"
    FigureForm("TFLOPS", True, ("tflops", "TFLOPS"), re.compile(rf"\b(?:tflops|TFLOPS)(?:_per_(?:gpu|GPU))?\s*[:=]\s*"
                                                                 rf"{_NUMBER}")),
    # Megatron-LM: "elapsed time per iteration (ms): 1520.4"
    FigureForm("ms per iteration", False, ("elapsed time per iteration",),
               re.compile(rf"elapsed time per iteration \(ms\)\s*:\s*{_NUMBER}")),
    # NeMo (Lightning progress bar): "train_step_timing in s=1.52"
    FigureForm("s per step", False, ("train_step_timing",),
               re.compile(rf"train_step_timing(?: in s)?\s*[:=]\s*{_NUMBER}")),
    # tqdm (PyTorch Lightning, HF Trainer progress bars): "3.20it/s", "step 1200 ... 3.2 it/s"; slower than one a
    # second it prints seconds per iteration instead: "1.52s/it"
    FigureForm("it/s", True, ("it/s",), re.compile(rf"{_NUMBER}\s*it/s\b")),
    FigureForm("s/it", False, ("s/it",), re.compile(rf"{_NUMBER}\s*s/it\b")),
    # "12.3 samples/s", "samples/sec: 12.3", HF Trainer "'train_samples_per_second': 12.3", DeepSpeed
    # "CurrSamplesPerSec=12.3"
    FigureForm("samples/s", True, ("samples/s", "samples per s", "samples_per_s", "CurrSamplesPerSec"),
               re.compile(rf"{_NUMBER}\s*samples/s(?:ec)?\b|samples(?:/s(?:ec)?|[ _]per[ _]s(?:ec(?:ond)?)?)\W{{0,4}}"
                          rf"{_NUMBER}|CurrSamplesPerSec\s*=\s*{_NUMBER}")),
    # "5120 tokens/s", "tokens/sec: 5120", "tokens_per_second=5120", torchtitan "tps: 5,123"
    FigureForm("tokens/s", True, ("tokens/s", "tokens per s", "tokens_per_s", "tps:"),
               re.compile(rf"{_NUMBER}\s*tokens/s(?:ec)?\b|tokens(?:/s(?:ec)?|[ _]per[ _]s(?:ec(?:ond)?)?)\W{{0,4}}"
                          rf"{_NUMBER}|\btps:\s*{_NUMBER}")),
)
FORM_BY_MEASURE = {f.measure: f for f in FIGURE_FORMS}
JOB_FIGURE_MARKERS = tuple(m for f in FIGURE_FORMS for m in f.markers)


def job_figures_query(limit: int) -> str:
    """The Logs Insights query of the job's figure lines, oldest first (a slash in a marker is escaped: the
    regex literal is slash-delimited)."""
    markers = "|".join(m.replace("/", "\\/") for m in JOB_FIGURE_MARKERS)
    return (f"filter @message like /{markers}/ "
            f"| fields @timestamp, @log, @logStream, @message | sort @timestamp asc | limit {limit}")


def read_figures(message: str) -> list[tuple[str, float]]:
    """Each form's figure in one log line, (measure, value); a form absent from the line gives nothing (a
    Megatron-LM line gives both its TFLOP/s and its ms per iteration)."""
    found: list[tuple[str, float]] = []
    for form in FIGURE_FORMS:
        match = form.reading.search(message)
        number = next((g for g in match.groups() if g), None) if match else None
        if number is None:
            continue
        try:
            found.append((form.measure, float(number.replace(",", ""))))
        except ValueError:  # "1,2,3" and the like: not a figure
            continue
    return found
