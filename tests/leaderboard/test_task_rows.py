"""Per-task rows: each status a verdict or a run can leave, and the reason a user reads for it."""

from __future__ import annotations

import json

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    ErrorRecord,
    EvalResult,
    Flag,
    Stage,
    Status,
    TimingRecord,
    TimingStats,
)

from agentforge.leaderboard.metrics import SampleOutcome
from agentforge.leaderboard.task_rows import run_reason, speedup_interval, task_rows, verdict_details


def _verdict(status: Status, stage: Stage = Stage.DONE, **records) -> str:
    return EvalResult(task_name="level1/relu", candidate_hash="h", backend="cpu", status=status, stage=stage,
                      **records).to_json()


def _stats(us: float, samples: tuple[float, ...]) -> TimingStats:
    return TimingStats(us, us, 0.0, us, us, len(samples), 0.0, samples)


def test_a_crash_says_what_killed_it() -> None:
    error = ErrorRecord("MemoryLimit", "the job's memory reached 16.49 GiB exceeded the 16 GiB limit\nmore",
                        signal=9)
    reason, interval = verdict_details(_verdict(Status.CRASH, Stage.CORRECTNESS, error=error))
    assert reason == ("MemoryLimit: the job's memory reached 16.49 GiB exceeded the 16 GiB limit "
                      "(killed by signal 9)")
    assert interval is None


def test_a_mismatch_names_the_shape_and_check() -> None:
    record = CorrectnessRecord("cpu", 1, False, max_abs_err=0.5, failed_check="allclose", message="5 of 9 differ")
    reason, _ = verdict_details(_verdict(Status.MISMATCH, compile=CompileRecord(True, "cpu"), correctness=(record,)))
    assert reason == "shape 'cpu': allclose, max abs err 0.5: 5 of 9 differ"


def test_a_rejecting_flag_is_the_reason() -> None:
    flag = Flag("torch_fallback", "aten::relu ran in the candidate's forward")
    reason, _ = verdict_details(_verdict(Status.INTEGRITY_FLAG, flags=(flag,)))
    assert reason == "integrity flag torch_fallback: aten::relu ran in the candidate's forward"


def test_a_build_failure_quotes_the_log_s_last_line() -> None:
    reason, _ = verdict_details(_verdict(Status.COMPILE_ERROR, Stage.BUILD, compile=CompileRecord(
        False, "cpu", log_tail="g++ ...\nrelu.cpp:3:1: error: expected ';'\n")))
    assert reason == "build failed: relu.cpp:3:1: error: expected ';'"


def test_an_accepted_verdict_has_its_shape_and_interval() -> None:
    # Paired samples: eager 2x the candidate on every repetition, so the interval is tight around 2.
    timing = TimingRecord("cpu", "host-monotonic", _stats(10.0, (10.0, 10.1, 9.9, 10.0, 10.2, 9.8)),
                          {"eager": _stats(20.0, (20.0, 20.2, 19.8, 20.0, 20.4, 19.6))})
    text = _verdict(Status.OK, compile=CompileRecord(True, "cpu"), correctness=(CorrectnessRecord("cpu", 1, True),),
                    timing=timing)
    reason, interval = verdict_details(text)
    assert reason.startswith("accepted, timed on shape 'cpu'")
    data = json.loads(text)
    assert interval == speedup_interval(data)
    if "speedup_ci" in data:  # an evaluator that writes the interval: it holds the paired ratio
        assert interval is not None and interval[0] <= 2.0 <= interval[1]


@pytest.mark.parametrize("raw, expected", [
    ([1.5, 2.5], (1.5, 2.5)), ({"low": 1.0, "high": 3.0}, (1.0, 3.0)), ({"lo": 1.0, "hi": 1.2}, (1.0, 1.2)),
    (None, None), ([2.0, 1.0], None), (["a", 1.0], None), ([1.0], None),
])
def test_speedup_interval_is_read_defensively(raw, expected) -> None:
    assert speedup_interval({"speedup_ci": raw}) == expected
    assert speedup_interval({"timing": {"speedup_ci": raw}}) == expected


def test_an_unreadable_verdict_says_so() -> None:
    assert verdict_details("{not json")[0] == "the stored verdict is not readable JSON"


def test_a_run_without_a_verdict_says_why() -> None:
    assert run_reason("failed", {"error": "ProviderError: no kernel to propose"}) == (
        "failed", "ProviderError: no kernel to propose")
    assert run_reason("done", {"best_source": None, "rounds": 1, "stop_reason": "max_rounds"}) == (
        "no kernel", "its loop kept no correct kernel in 1 round (max_rounds)")
    assert run_reason("done", {"best_source": "x", "rank_error": "task error: TaskInputsError: boom"}) == (
        "task_error", "task error: TaskInputsError: boom")
    assert run_reason("running", {})[0] == "unfinished"
    assert run_reason("task_error", {"stop_reason": "task error: get_inputs() raised"}) == (
        "task_error", "its loop stopped: task error: get_inputs() raised")


def test_rows_cover_every_suite_task_in_order() -> None:
    per_task = {"a": SampleOutcome("a", True, speedup=2.0, reason="accepted", speedup_ci=(1.8, 2.2)),
                "b": SampleOutcome("b", False, status="crash", reason="MemoryLimit: ...")}
    runs = {"c": ("failed", {"error": "boom"})}
    rows = task_rows(["a", "b", "c", "d"], per_task, runs)
    assert [(r.task, r.status, r.accepted) for r in rows] == [
        ("a", "ok", True), ("b", "crash", False), ("c", "failed", False), ("d", "missing", False)]
    assert rows[0].speedup_ci == (1.8, 2.2) and rows[1].reason == "MemoryLimit: ..."
    assert rows[3].reason == "no evaluation stored for this task"


def test_a_flagged_ok_verdict_reads_rejected() -> None:
    flagged = SampleOutcome("a", False, status="ok", flagged=True, reason="integrity flag torch_fallback: x")
    (row,) = task_rows(["a"], {"a": flagged}, {})
    assert (row.status, row.accepted) == ("rejected", False)
