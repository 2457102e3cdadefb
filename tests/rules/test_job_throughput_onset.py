"""The failure's onset from a job's throughput or step time (#35 item 10), from RULES §0.5: without a stated onset,
"before the failure" is measured from the first failure signal read, and a job throughput or step-time drop in a
log read is one. The impact window's start is a search bound, never the onset; a cause is Proven only before it.

The world: one p5 node of a ParallelCluster cluster whose training job prints Megatron-LM's iteration line every
minute to its own log group (named with --log-group, as an operator does for a job's stdout). The step time is
1520.4 ms until 10:40, then doubles. The node's kernel log carries an Xid 79 (fallen off the bus, hardware class)
either before the drop (10:20) or after it (10:50). The audit reads 08:00–11:00 with no --onset.
"""

from __future__ import annotations

from gpuaudit.model.evidence import AuditRequest, Evidence
from gpuaudit.model.result import Branch, Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import collect, run_audit
from tests.helpers.worlds import PClusterWorld, at, calls, one_node_world

SINCE, UNTIL = at(8), at(11)
JOB = "/aws/batch/job"
JOB_STREAM = "megatron-gpt-175b/rank-0"


def megatron(step_ms: float) -> str:
    """Megatron-LM's training-log line, as `training_log` prints it (one per log interval)."""
    return (f" iteration     1200/  500000 | consumed samples:       614400 | "
            f"elapsed time per iteration (ms): {step_ms} | throughput per GPU (TFLOP/s/GPU): n/a | learning rate: "
            "2.999E-04 | global batch size:   512 | lm loss: 2.113E+00 | loss scale: 1.0 | grad norm: "
            "0.412 | number of skipped iterations:   0")


def world(*, xid_at: str | None, job_lines: bool = True) -> PClusterWorld:
    w = one_node_world(xid_at)
    if job_lines:  # the step time doubles at 10:40 and stays there
        w.stream(JOB, JOB_STREAM, periodic=[(at(7, 30), at(10, 40), 60, megatron(1520.4)),
                                            (at(10, 40), at(11, 30), 60, megatron(3040.8))])
    else:  # the job logs, but no throughput or step-time figure
        w.lines(JOB, JOB_STREAM, at(7, 30), at(11, 30), 60, "[rank0] step 1200 | lm loss: 2.113 | grad norm: 0.41")
    return w


def request(**extra: object) -> AuditRequest:
    return AuditRequest(cluster="llm-pretrain", mode="incident", since=parse_time(SINCE), until=parse_time(UNTIL),
                        log_groups=[JOB], **extra)  # type: ignore[arg-type]


def audit(w: PClusterWorld) -> Result:
    return run_audit(w.aws(), request())


def branch(result: Result, letter: str) -> Branch:
    return next(b for b in result.branches if b.branch == letter)


def test_a_step_time_doubling_is_the_onset_and_an_xid_before_it_is_proven() -> None:
    result = audit(world(xid_at=at(10, 20)))
    assert result.window.onset == parse_time(at(10, 40))
    source = result.window.onset_source or ""
    assert "step time drop: ms per iteration rose from 1520.4 (median before) to 3040.8" in source
    assert f"{JOB} / {JOB_STREAM}" in source
    a = branch(result, "A")
    assert (a.status, a.label) == ("Root cause", "Proven")
    assert f"Failure onset: {at(10, 40)} (job step time drop" in result.report_markdown


def test_an_xid_after_the_step_time_drop_is_not_proven_from_it() -> None:
    result = audit(world(xid_at=at(10, 50)))
    assert result.window.onset == parse_time(at(10, 40))
    a = branch(result, "A")
    assert a.status != "Root cause" and a.label == "Hypothesis (to validate)"
    assert f"is after the onset {at(10, 40)}, job step time drop" in a.evidence


def test_a_job_log_without_throughput_lines_gives_no_onset_and_the_window_start_is_never_called_one() -> None:
    result = audit(world(xid_at=None, job_lines=False))
    assert result.window.onset is None and result.window.onset_source is None
    assert "Failure onset: not known" in result.report_markdown
    report = result.report_markdown + result.model_dump_json()
    assert "slowdown began" not in report and f"onset {SINCE}" not in report
    evidence = collect(world(xid_at=None, job_lines=False).aws(), request())
    assert [q.log_groups for q in evidence.queries if q.purpose == "job-figures"] == [[JOB]]  # searched: nothing
    assert evidence.job_figure_groups == [JOB] and evidence.job_figures == []


def test_a_job_group_found_by_its_nccl_lines_is_read_without_being_named() -> None:
    w = world(xid_at=None, job_lines=False)
    jobs = w.stream(f"/aws/batch/{w.cluster}-jobs", "train/run-7", events=[
        (at(7, 31), "ip-10-0-0-1:4711:4711 [0] NCCL INFO NET/OFI Selected Provider is efa, fabric is efa-direct")])
    w.stream(f"/aws/batch/{w.cluster}-jobs", jobs, periodic=[  # tqdm: 3.20 it/s, then 1.10 it/s from 09:30
        (at(7, 32), at(9, 30), 30, "Epoch 0:  45%|####5     | 1200/2660 [06:15<07:36, 3.20it/s, v_num=0]"),
        (at(9, 30), at(11, 30), 30, "Epoch 0:  46%|####6     | 1230/2660 [06:45<21:40, 1.10it/s, v_num=0]")])
    evidence = collect(w.aws(), AuditRequest(cluster="llm-pretrain", mode="incident", since=parse_time(SINCE),
                                             until=parse_time(UNTIL)))
    read = [q.log_groups for q in evidence.queries if q.purpose == "job-figures"]
    assert read == [[f"/aws/batch/{w.cluster}-jobs"]]  # the job's group only: never the nodes' system logs
    result = run_audit(w.aws(), AuditRequest(cluster="llm-pretrain", mode="incident", since=parse_time(SINCE),
                                             until=parse_time(UNTIL)))
    assert result.window.onset == parse_time(at(9, 30))
    assert "job throughput drop: it/s fell from 3.2 (median before) to 1.1" in (result.window.onset_source or "")


def test_a_job_figures_read_that_fails_gives_no_onset_and_says_the_drop_is_unread() -> None:
    w = world(xid_at=at(10, 50))
    clean = audit(w)
    started = calls(clean, "logs", "StartQuery")
    # the job read is the batch's last query
    w.raw["faults"] = [{"service": "logs", "operation": "StartQuery", "error": "AccessDeniedException", "times": 1,
                        "after": started - 1}]
    evidence: Evidence = collect(w.aws(), request())
    assert evidence.job_figure_unread_groups == [JOB] and evidence.job_figures == []
    result = audit(w)
    assert result.window.onset is None and result.window.onset_source is None
    unread = f"the throughput and step-time lines of {JOB} were not read: an earlier drop there is not excluded"
    assert result.window.onset_unread == unread
    assert "Failure onset: not known — none stated (--onset) and no failure signal read" in result.report_markdown
    assert unread in result.report_markdown
    assert any("job-figures query over" in g and JOB in g for g in result.visibility_gaps)


def test_a_job_logging_past_the_row_cap_is_read_in_time_slices_and_the_drop_still_found() -> None:
    w = world(xid_at=None, job_lines=False)
    w.stream(JOB, "hf-trainer/rank-0", periodic=[  # one tqdm line a second: 14,400 lines in the read
        (at(7, 30), at(10, 40), 1, " 38%|###8      | 1200/3125 [10:00<16:02,  2.00it/s]"),
        (at(10, 40), at(11, 30), 1, " 39%|###9      | 1221/3125 [10:21<42:18,  0.75it/s]")])
    evidence = collect(w.aws(), request())
    reads = [q for q in evidence.queries if q.purpose == "job-figures"]
    assert len(reads) > 1 and any(q.truncated for q in reads)  # the whole read reached the cap: read again
    assert evidence.job_figure_unread_groups == [] and evidence.job_figure_groups == [JOB]
    assert len(evidence.job_figures) == 4 * 3600  # every line of 07:30-11:30 read once, none twice
    result = run_audit(w.aws(), request())
    assert result.window.onset == parse_time(at(10, 40))
    assert "it/s fell from 2 (median before) to 0.75" in (result.window.onset_source or "")
